"""How a running job hears that it should stop or yield its GPU, and why, within a second and
without polling Redis.

revoke.lua publishes a job's id on the STOPS channel when its owner (or an operator) asks a
running job to stop, and marks the job (its `cancel` field names who asked); the preemption
policy (app/worker/preemption.py) publishes it on YIELDS with an ask key naming the job owed the
GPU. Each worker keeps one subscription to both channels, in a thread, and sets the run's flags.
A message can be missed (pub/sub does not queue them while the connection is down), so the
run's check also reads the mark and the ask key once per heartbeat: a cancel or an ask always
arrives, within HEARTBEAT_SECONDS at worst.

RunAsks is the one check a run's executor asks, as should_stop and should_yield: whether this
run should stop or yield, and why (end_reason.Why). Each reason is known here as it comes: the
mark, read once where a stop is heard, says whose stop it is; the lease says it was lost; the
runner's hand_back says the worker shuts down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import redis
from redis.client import PubSub

from app.store.keys import STOPS, YIELDS, ask_key, job_key
from app.vtrr.celery_queue import UNREACHABLE  # Redis not reached: not the job's failure
from app.vtrr.wire import as_text
from app.worker.calls import Ended
from app.worker.end_reason import Why, asked_by
from app.worker.preemption import read_ask

log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.2  # how long the listening thread waits for a message before it looks again


@dataclass(frozen=True)
class Heard:
    """What the channels said of one run: a stop, and an ask to yield."""

    stop: threading.Event = field(default_factory=threading.Event)
    ask: threading.Event = field(default_factory=threading.Event)


class StopListener:
    """One worker's subscription to the STOPS and YIELDS channels; `watch` a job while it runs."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._watched: dict[str, Heard] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Subscribe, in a daemon thread that reconnects when Redis comes back."""
        self._thread = threading.Thread(target=self._listen, name="stops", daemon=True)
        self._thread.start()

    def watch(self, job_id: str) -> Heard:
        """The flags that a stop or an ask of job_id sets, until unwatch(job_id)."""
        with self._lock:
            return self._watched.setdefault(job_id, Heard())

    def unwatch(self, job_id: str) -> None:
        """Forget a job that has ended."""
        with self._lock:
            self._watched.pop(job_id, None)

    def close(self) -> None:
        """Stop listening."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * IDLE_WAIT_S + 1)

    def _listen(self) -> None:
        while not self._closed.is_set():
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(STOPS, YIELDS)
                self._pump(pubsub)
            except redis.RedisError:
                log.warning("stop channel lost; heartbeats still carry cancels", exc_info=True)
                self._closed.wait(1.0)  # Redis is away: try again in a second
            finally:
                pubsub.close()

    def _pump(self, pubsub: PubSub) -> None:
        while not self._closed.is_set():
            message: dict[str, Any] | None = pubsub.get_message(timeout=IDLE_WAIT_S)
            if message is not None and message.get("type") == "message":
                self._heard(as_text(message["channel"]), as_text(message["data"]))

    def _heard(self, channel: str, job_id: str) -> None:
        with self._lock:
            heard = self._watched.get(job_id)
        if heard is not None:
            (heard.ask if channel == YIELDS else heard.stop).set()


class RunAsks:
    """One run's asks: should_stop() and should_yield(), each sticky once true, and why.

    A stop comes from the lease (lost: `lease_lost`), the channel or the job's mark (the owner's
    or an operator's: read once, where it is heard), or the runner (hand_back). An ask to yield,
    of a preemptible run, from the channel or its ask key, which names the job owed the GPU
    (`owed`). Both keys are read in one call, at most once per heartbeat (`every`), and at once
    when a message was heard."""

    def __init__(
        self,
        client: redis.Redis,
        job_id: str,
        heard: Heard,
        lease_lost: Callable[[], bool],
        every: float,
        *,
        preemptible: bool = False,
    ) -> None:
        self._client, self.job_id, self._heard, self._lost = client, job_id, heard, lease_lost
        self._every, self._preemptible = every, preemptible
        self._next_look = time.monotonic() + every
        #: A stop the worker itself ordered (HAND_BACK), from the shutdown's timer thread.
        self._ordered: Why | None = None
        self._stop: Why | None = None  # the first stop, as it came
        self._heard_read = False  # whether a stop heard on the channel had its mark read
        self.asked = False  # asked to yield
        self.owed: tuple[str, str] | None = None  # the job owed the GPU and its queue, if known

    @property
    def why(self) -> Why | None:
        """Why the run was stopped (None: it was not); a hand-back outranks any other stop: the
        worker returns the job whoever else asked it to stop."""
        return self._ordered or self._stop

    def named(self, ended: Ended) -> Ended:
        """The run's end with its reason where only this check knows it: whose stop a
        `cancelled` end was, and that a `preempted` one was asked for."""
        if ended.end == "cancelled":
            return replace(ended, why=self.why or Why.LEASE_LOST)  # (a stop, from nowhere known)
        if ended.end == "preempted" and self.asked:
            return replace(ended, why=Why.YIELD)
        return ended

    def hand_back(self) -> None:
        """The worker shuts down and its grace is out: stop the run, to hand its job back."""
        self._ordered = Why.HAND_BACK

    def should_stop(self) -> bool:
        """Whether the run should stop (what the job's ctx.cancelled reads)."""
        if self._stop is None and self._ordered is None:
            self._stop = self._stopped()
        return self.why is not None

    def should_yield(self) -> bool:
        """Whether a preemptible run should yield its GPU (what ctx.preempted reads)."""
        if self._preemptible and not self.asked:
            heard = self._heard.ask.is_set()
            self._look(now=heard)
            self.asked = self.asked or heard  # heard: asked, whether or not its key is still there
        return self.asked

    def _stopped(self) -> Why | None:
        if self._lost():
            return self._asker() or Why.LEASE_LOST  # an operator's drop takes the lease too
        if self._heard.stop.is_set() and not self._heard_read:
            self._heard_read = True  # read once: while Redis cannot say whose, the next looks
            if self._look(now=True):
                return self._stop or Why.LEASE_LOST  # a stop heard, no one's: the old reading
        self._look()
        return self._stop

    def _asker(self) -> Why | None:
        """Whose stop the job's mark says, read once; None: none, or Redis is away."""
        try:
            return asked_by(self._client.hget(job_key(self.job_id), "cancel"))
        except UNREACHABLE:
            return None

    def _look(self, *, now: bool = False) -> bool:
        """Once per heartbeat (or now), the job's mark and, for a preemptible run, its ask key,
        in one call: the stop the mark asks for is kept for should_stop, an ask to yield in
        asked and owed; whether they were read. Redis away for a moment, the run works on: the
        heartbeat guards the lease."""
        if not now and time.monotonic() < self._next_look:
            return False
        self._next_look = time.monotonic() + self._every
        try:
            with self._client.pipeline(transaction=False) as pipe:
                pipe.hget(job_key(self.job_id), "cancel")
                if self._preemptible and not self.asked:
                    pipe.get(ask_key(self.job_id))
                mark, *ask = pipe.execute()
        except UNREACHABLE:
            return False
        if ask and ask[0] is not None:
            self.asked, self.owed = True, read_ask(ask[0])
        self._stop = self._stop or asked_by(mark)
        return True
