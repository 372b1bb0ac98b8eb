"""When a job of an account with limits should start, as far as its account's limits let it: its
account's jobs ahead of it in its queue, walked in order.

An account's limits (max_running, max_held_gpu_seconds: app/wiring/limits.py) let its queued jobs
start one after another, each once its running jobs have run down far enough. The walk plays that
out from what the fair queue keeps (app/vtrr/limits.py): the account's jobs in flight over both
queues (each one's lease start and weight), and its queued jobs in this queue in their order (the
one in line, if any, then its park). Each job ahead starts at the first moment the limits let it,
no sooner than the one before it, and is then taken to run its declared seconds; the job itself
starts at the first moment after that. So the second of two held jobs of a max_running: 1 account
starts no sooner than the first's start plus its declared seconds.

Bounded: at most WALK of the jobs ahead are read one by one (their weights: one round trip); any
further back are taken as jobs of the mean length of those read, run as many at once as the
limits let (an estimate, as the queue's own is). A read costs a pipeline of O(1) and O(log N)
commands, one HVALS of the account's jobs in flight (at most its running jobs), and a ZRANGE of at
most WALK members; a job further back than WALK costs one ZRANK more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.vtrr.aio import AsyncFairQueue
from app.vtrr.layout import Field
from app.vtrr.limits import Hold, hold_of, limits_of
from app.vtrr.wire import as_text, task_id_of

#: The most of an account's queued jobs ahead of a job that one estimate reads one by one.
WALK = 32
SLACK_S = 1e-9  # what float sums may be off by (as the queue's own check allows)


@dataclass(frozen=True)
class Walk:
    """An account's line as the estimate sees it (times in Unix seconds, Redis's clock)."""

    now: float
    most_running: int | None  # max_running; None: no such limit
    most_held_s: float | None  # max_held_gpu_seconds; None: no such limit
    running_until: Sequence[float]  # when each of its jobs in flight should end, as declared
    ahead_s: Sequence[float]  # the declared seconds of its queued jobs ahead, in order, read
    unread: int = 0  # its queued jobs further ahead that were not read (beyond WALK)

    @property
    def ahead(self) -> int:
        """How many of the account's queued jobs are ahead of the job."""
        return len(self.ahead_s) + self.unread


@dataclass(frozen=True)
class AccountLine:
    """What the queue says of a job's account: whether its limits hold it back now (Hold), and
    the walk of its line; walk is None when the account has no limits in the queue."""

    hold: Hold | None
    walk: Walk | None


def start_at(walk: Walk, own_s: float, not_before: float) -> float:
    """When the job (of own_s declared seconds) may start as its account's limits go, its
    account's first job ahead starting no sooner than not_before."""
    ends = [max(walk.now, end) for end in walk.running_until]
    t = max(walk.now, not_before)
    for seconds in walk.ahead_s:
        t = _earliest(t, ends, walk, seconds)
        ends.append(t + seconds)
    if walk.unread:
        known = list(walk.ahead_s) or [own_s]
        mean = sum(known) / len(known)
        # the jobs not read, and this one, start one mean run apart per job run at once
        return t + (walk.unread + 1) * mean / _at_once(walk, mean)
    return _earliest(t, ends, walk, own_s)


def _at_once(walk: Walk, mean_s: float) -> int:
    """How many jobs of mean_s seconds the limits let run at once (at least 1)."""
    held = walk.most_held_s
    by_held = math.inf if held is None else max(1, math.floor(held / max(mean_s, SLACK_S)))
    by_count = math.inf if walk.most_running is None else walk.most_running
    fits = min(by_held, by_count)
    return 1 if math.isinf(fits) else max(1, int(fits))


def _earliest(t: float, ends: list[float], walk: Walk, seconds: float) -> float:
    """The first moment from t at which the limits let a job of `seconds` start beside the jobs
    running until `ends` (the queue's rule, vtrr/lua/lib/limits.lua may_start: a job starts
    alone whatever its weight). Each turn of the loop passes one end: at most len(ends) turns."""
    while True:
        live = sorted(end for end in ends if end > t)
        if not live:
            return t
        if walk.most_running is None or len(live) < walk.most_running:
            if walk.most_held_s is None:
                return t
            over = sum(end - t for end in live) + seconds - walk.most_held_s
            if over <= SLACK_S:
                return t
            if seconds <= walk.most_held_s:  # the held seconds run down, len(live) a second
                at = t + over / len(live)
                if at <= live[0]:
                    return at
        t = live[0]


async def read(queue: AsyncFairQueue, account: str, task_id: str) -> AccountLine:
    """The account's line in the queue as far as the job's place in it (see the module)."""
    keys = queue.keys
    async with queue.redis.pipeline(transaction=True) as pipe:
        pipe.time()
        pipe.hget(keys.limits, account)
        pipe.hget(keys.representatives, account)
        pipe.zscore(keys.waits, account)
        pipe.hvals(keys.live + account)
        pipe.hget(keys.item_key(task_id), Field.MEMBER.value)
        pipe.zrange(keys.park + account, 0, WALK - 1)
        (secs, us), raw, rep, wait_us, live, own, parked = await pipe.execute()
    hold = hold_of(raw, rep, wait_us, live)
    if raw is None:
        return AccountLine(hold, None)
    limits = limits_of(raw)
    rate = limits.weight_per_second
    if rate <= 0 or own is None:  # weights that never run down; or the job left the queue
        return AccountLine(hold, None)
    line = [as_text(m) for m in ([rep] if rep else []) + list(parked)]
    ahead, unread = await _ahead(queue, account, as_text(own), line, len(parked))
    weights = await _weights(queue, ahead)
    running = [int(s) / 1e6 + float(w) / rate for s, w in (as_text(v).split() for v in live)]
    walk = Walk(
        now=int(secs) + int(us) / 1e6,
        most_running=limits.most_in_flight,
        most_held_s=None if limits.most_held is None else limits.most_held / rate,
        running_until=running,
        ahead_s=[w / rate for w in weights],
        unread=unread,
    )
    return AccountLine(hold, walk)


async def _ahead(
    queue: AsyncFairQueue, account: str, own: str, line: list[str], parked: int
) -> tuple[list[str], int]:
    """The task ids of the account's jobs read ahead of the job's member `own` (`line`: the
    one in the queue, if any, then the first `parked` of its park), and how many more are
    ahead that were not read."""
    if own in line:
        return [task_id_of(m) for m in line[: line.index(own)]], 0
    rank = await queue.redis.zrank(queue.keys.park + account, own)
    if not isinstance(rank, int):  # None: it moved between the two reads, nothing known ahead
        return [], 0
    return [task_id_of(m) for m in line], max(0, rank - parked)


async def _weights(queue: AsyncFairQueue, task_ids: list[str]) -> list[float]:
    """The weights of the queued items (an item gone since counts as none)."""
    if not task_ids:
        return []
    async with queue.redis.pipeline(transaction=False) as pipe:
        for task_id in task_ids:
            pipe.hget(queue.keys.item_key(task_id), Field.WEIGHT.value)
        found = await pipe.execute()
    return [float(w) for w in found if w is not None]
