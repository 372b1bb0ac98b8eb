"""Preemption: which run yields its GPU to a job that is owed one (docs/fairness.md, "Preemption").

A job is owed a GPU once it has been next in its queue (what the next free worker would lease;
its status says waiting_for "gpu") for PREEMPT_AFTER_S, while no worker that serves its queue is
free. A job held back by its account's limits is never next in line (the queue parks it), so it
is never owed. An owed job whose account holds less than its share of the busy workers may then
take the GPU of a preemptible run, PREEMPT_MIN_RUN_S old or more, of an account that holds more
than its share, on a worker that serves the owed job's queue: the account furthest over its share
first, then its run that has lasted the least. Shares are taken over the accounts with a job
running or waiting. Where the GPUs cannot be split evenly (one GPU, two accounts), the accounts
take turns: each wait is PREEMPT_AFTER_S at least and each run PREEMPT_MIN_RUN_S at least, so
there are no storms. One ask per owed job at a time, and none for a run asked already.

In a mixed fleet (app/fleet/routing.py) each queue has a head per class of card, the job that
the next free card of that class would lease; it is owed a GPU when no worker of that class is
free, and only a run on a card of that class may be asked to yield to it.

Every worker runs a Preemptor thread; each tick (TICK_S) the one that takes PREEMPT_LOCK decides
for all, from the workers' heartbeats (the runs in hand: app/store/workers.py) and the queues'
heads. An ask is two keys that expire PREEMPT_GRACE_S + ASK_SLACK_S later (an ask whose run is
no longer in any heartbeat is dropped at once, so a worker lost mid-ask does not block the owed
job) and a message on YIELDS, which the run's worker
hears (app/worker/stops.py); the run then sees ctx.preempted, and its worker puts it back in line
and leases the owed job itself (app/worker/yields.py).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import redis
from redis.exceptions import RedisError

from app.auth import AccountBook
from app.models import Kind
from app.settings import Settings
from app.store.keys import PREEMPT_HEADS, PREEMPT_LOCK, YIELDS, ask_key, asked_for_key
from app.store.workers import ALIVE_BEATS, Seen, read
from app.vtrr.wire import as_text
from app.wiring.loop import Loop

log = logging.getLogger(__name__)
#: How often the policy looks: at least once a second, whatever the other intervals are.
TICK_S = 0.5
#: How long an ask outlives its grace: for the run's worker to record it and lease the owed job.
ASK_SLACK_S = 60.0
#: How often the accounts' shares are read again (an admin's change reaches the policy so).
SHARES_EVERY_S = 30.0


class Queue(Protocol):
    """What the policy reads of a fair queue."""

    def head(self) -> tuple[str, str] | None:
        """The item the next lease would take, and its partition (the account)."""
        ...

    def top_partitions(self, n: int = 10) -> list[tuple[str, int]]:
        """Partitions with items queued."""
        ...

    def kind_view(self, kind: str) -> Queue:
        """The queue as the workers of one class of card see it (a mixed fleet)."""
        ...


@dataclass(frozen=True)
class Owed:
    """A job next in line with no free worker, since `since` (Redis's clock)."""

    job: str
    account: str
    kind: str
    since: float
    gpu_class: str | None = None  # in a mixed fleet, the class of card it is owed

    def may_take(self, worker: Seen) -> bool:
        """Whether the card of this worker may run the job: one of its queue, and of the class
        it is owed where it is owed one."""
        return self.kind in worker.queues and self.gpu_class in (None, worker.gpu_class)


@dataclass(frozen=True)
class Ask:
    """The run of `victim` (on `worker`) is asked to yield its GPU to `owed`."""

    victim: str
    worker: str
    owed: Owed


def choose(
    owed: Sequence[Owed],
    workers: Sequence[Seen],
    waiting: Iterable[str],
    share: Callable[[str], float],
    now: float,
    settings: Settings,
    asked: Collection[str] = (),
    answered: Collection[str] = (),
) -> list[Ask]:
    """The asks to make now (see the module's docstring). `workers` are those alive; `waiting`
    the accounts with jobs queued; `asked` the jobs whose runs were asked already, `answered`
    the owed jobs with an ask outstanding."""
    runs = [w for w in workers if w.running is not None]
    running = Counter(w.running.account for w in runs if w.running is not None)
    for w in runs:  # a run asked already is as good as gone to the job it yields to
        if w.running is not None and w.running.job in asked:
            running[w.running.account] -= 1
    accounts = set(running) | set(waiting) | {o.account for o in owed}
    total = sum(share(a) for a in accounts) or 1.0
    fair = {a: len(runs) * share(a) / total for a in accounts}
    taken = set(asked)
    asks: list[Ask] = []
    for need in sorted(owed, key=lambda o: (o.since, o.job)):
        if need.job in answered or now - need.since < settings.preempt_after_s:
            continue
        if any(ask.owed.job == need.job for ask in asks):
            continue  # owed on several classes of card: one ask is enough
        if running[need.account] >= fair[need.account]:
            continue  # its account has its share: it waits its turn
        candidates = [
            w
            for w in runs
            if w.running is not None
            and w.running.preemptible
            and w.running.job not in taken
            and need.may_take(w)
            and w.running.account != need.account
            and now - w.running.since >= settings.preempt_min_run_s
            and running[w.running.account] > fair[w.running.account]
        ]
        if not candidates:
            continue

        def order(w: Seen) -> tuple[float, float, str]:
            assert w.running is not None
            over = running[w.running.account] - fair[w.running.account]
            return (-over, now - w.running.since, w.running.job)

        victim = min(candidates, key=order)
        assert victim.running is not None
        taken.add(victim.running.job)
        running[victim.running.account] -= 1
        running[need.account] += 1
        asks.append(Ask(victim.running.job, victim.name, need))
    return asks


class Preemptor(Loop):
    """A worker's thread that decides preemptions when it holds PREEMPT_LOCK (see above)."""

    def __init__(
        self,
        client: redis.Redis,
        name: str,
        queues: Mapping[Kind, Queue],
        share: Callable[[str], float],
        settings: Settings,
        classes: Sequence[str] = (),
    ) -> None:
        super().__init__("preemptor")
        self.client, self.name, self.queues, self.share = client, name, queues, share
        self.settings = settings
        #: Each queue's lines: (its name in PREEMPT_HEADS, kind, class of card, the queue as
        #: the cards of that class see it); one per queue outside a mixed fleet (no classes).
        self.lines: list[tuple[str, Kind, str | None, Queue]] = [
            (f"{kind}.{c}", kind, c, queue.kind_view(c))
            for kind, queue in queues.items()
            for c in classes
        ] or [(kind, kind, None, queue) for kind, queue in queues.items()]

    def step(self) -> float:
        """One tick of the thread; the pause until the next."""
        try:
            self.tick()
        except RedisError:
            log.warning("the preemption policy could not reach Redis", exc_info=True)
        except Exception:  # a bug here must not stop the worker's jobs
            log.exception("the preemption policy failed; it looks again next tick")
        return TICK_S

    def tick(self) -> list[Ask]:
        """Look once, if no other worker is looking this tick; the asks made."""
        hold_ms = max(1, round(TICK_S * 1000 * 0.9))
        if not self.client.set(PREEMPT_LOCK, self.name, nx=True, px=hold_ms):
            return []
        seconds, micros = self.client.time()
        now = seconds + micros / 1e6
        cutoff = now - ALIVE_BEATS * self.settings.heartbeat_seconds
        workers = [w for w in read(self.client, now) if w.seen >= cutoff and w.broken is None]
        owed = self._owed(workers, now)
        if not owed:
            return []
        waiting = {p for q in self.queues.values() for p, _ in q.top_partitions(1 << 30)}
        runs = [w.running.job for w in workers if w.running is not None]
        asked = self._existing(runs, ask_key)
        answered = self._answered(owed, set(runs))
        asks = choose(owed, workers, waiting, self.share, now, self.settings, asked, answered)
        for ask in asks:
            self._ask(ask)
        return asks

    def _owed(self, workers: Sequence[Seen], now: float) -> list[Owed]:
        """The head of each queue that no free worker serving it can take at once, and since
        when it has been the head (kept in PREEMPT_HEADS across ticks and workers)."""
        heads = {as_text(k): as_text(v) for k, v in self.client.hgetall(PREEMPT_HEADS).items()}
        owed = []
        for line, kind, gpu_class, queue in self.lines:
            head = queue.head()
            if head is None:
                if line in heads:
                    self.client.hdel(PREEMPT_HEADS, line)
                continue
            job, account = head
            was, _, since = heads.get(line, "").partition(" ")
            if was != job:
                since = repr(now)
                self.client.hset(PREEMPT_HEADS, line, f"{job} {since}")
            need = Owed(job, account, kind, float(since), gpu_class)
            serving = [w for w in workers if need.may_take(w)]
            if serving and all(w.busy_until is not None for w in serving):
                owed.append(need)
        return owed

    def _answered(self, owed: Sequence[Owed], running: set[str]) -> set[str]:
        """The owed jobs with an ask outstanding to a run still in hand; an ask whose run is
        gone (its worker died) is dropped, so that another run can be asked."""
        victims = self.client.mget([asked_for_key(o.job) for o in owed])
        outstanding = set()
        for need, victim in zip(owed, victims, strict=True):
            if victim is None:
                continue
            if as_text(victim) in running:
                outstanding.add(need.job)
            else:
                self.client.delete(asked_for_key(need.job), ask_key(as_text(victim)))
        return outstanding

    def _existing(self, jobs: Sequence[str], key: Callable[[str], str]) -> set[str]:
        """Those of the jobs whose key(job) exists, in one round trip."""
        with self.client.pipeline(transaction=False) as pipe:
            for job in jobs:
                pipe.exists(key(job))
            return {job for job, n in zip(jobs, pipe.execute(), strict=True) if n}

    def _ask(self, ask: Ask) -> None:
        ttl = max(1, round(self.settings.preempt_grace_s + ASK_SLACK_S))
        owed = ask.owed
        with self.client.pipeline(transaction=True) as pipe:
            pipe.set(ask_key(ask.victim), ask_value(owed.job, owed.kind), ex=ttl)
            pipe.set(asked_for_key(owed.job), ask.victim, ex=ttl)
            pipe.publish(YIELDS, ask.victim)
            pipe.execute()
        log.info(
            "asked a run to yield its GPU to a job owed one",
            extra={"task_id": ask.victim, "worker": ask.worker, "owed": owed.job},
        )


class Shares:
    """The accounts' shares, read from the database at most every `every` seconds (workers
    keep no accounts: the policy alone needs their shares). A failed read keeps the last."""

    def __init__(self, load: Callable[[], AccountBook], every: float = SHARES_EVERY_S) -> None:
        self._load, self._every = load, every
        self._book: AccountBook | None = None
        self._read_at = -math.inf

    def __call__(self, user_id: str) -> float:
        if time.monotonic() - self._read_at >= self._every:
            self._read_at = time.monotonic()
            try:
                self._book = self._load()
            except Exception:
                log.warning("the accounts' shares could not be read; the last ones stand")
        return 1.0 if self._book is None else self._book.share(user_id)


def ask_value(owed: str, kind: str) -> str:
    """What an ask key holds: the owed job and its queue (read back by read_ask)."""
    return f"{owed} {kind}"


def read_ask(raw: bytes | str) -> tuple[str, str]:
    """The owed job and its queue, from an ask key's value."""
    owed, _, kind = as_text(raw).partition(" ")
    return owed, kind


def answered(client: redis.Redis, job_id: str, owed: str) -> None:
    """Forget the ask once the run it asked has yielded and the owed job was leased (or not)."""
    client.delete(ask_key(job_id), asked_for_key(owed))
