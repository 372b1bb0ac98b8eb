"""How a running job hears that it should stop, within a second and without polling Redis.

revoke.lua publishes a job's id on the STOPS channel when its owner (or an operator) asks a
running job to stop. Each worker keeps one subscription to that channel, in a thread, and sets
the flag of the job it is running. A message can be missed (pub/sub does not queue them while
the connection is down), so the runner also reads the job's cancel mark once per heartbeat:
a cancel always arrives, within HEARTBEAT_SECONDS at worst. StopCheck is the one question a
run's executor asks: should this run stop now?

An ask to yield the GPU (app/worker/preemption.py) comes the same way, on the YIELDS channel,
with its ask key read once per heartbeat in case the message was missed: YieldCheck.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.client import PubSub

from app.store.keys import STOPS, YIELDS, ask_key
from app.vtrr import Heartbeat
from app.vtrr.celery_queue import UNREACHABLE  # Redis not reached: not the job's failure
from app.vtrr.wire import as_text
from app.worker.preemption import read_ask

log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.2  # how long the listening thread waits for a message before it looks again


class StopListener:
    """One worker's subscription to the STOPS channel; `watch` a job while it runs."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._watched: dict[str, threading.Event] = {}
        self._yields: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Subscribe, in a daemon thread that reconnects when Redis comes back."""
        self._thread = threading.Thread(target=self._listen, name="stops", daemon=True)
        self._thread.start()

    def watch(self, job_id: str) -> threading.Event:
        """The flag that a stop of job_id sets, until unwatch(job_id)."""
        with self._lock:
            return self._watched.setdefault(job_id, threading.Event())

    def watch_yield(self, job_id: str) -> threading.Event:
        """The flag that an ask that job_id's run yield its GPU sets, until unwatch(job_id)."""
        with self._lock:
            return self._yields.setdefault(job_id, threading.Event())

    def unwatch(self, job_id: str) -> None:
        """Forget a job that has ended."""
        with self._lock:
            self._watched.pop(job_id, None)
            self._yields.pop(job_id, None)

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
            flags = self._yields if channel == YIELDS else self._watched
            flag = flags.get(job_id)
        if flag is not None:
            flag.set()


class StopCheck:
    """should_stop() of one run: the lease was lost, or a stop was heard on the STOPS channel,
    or (once per heartbeat, for a message that was missed) the job carries a cancel mark."""

    def __init__(
        self, beat: Heartbeat, heard: threading.Event, marked: Callable[[], bool], every: float
    ) -> None:
        self._beat, self._heard, self._marked, self._every = beat, heard, marked, every
        self._next_look = time.monotonic() + every
        self._stopped = False

    def __call__(self) -> bool:
        if not self._stopped:
            self._stopped = self._look()  # once asked to stop, a run stays stopped
        return self._stopped

    def _look(self) -> bool:
        if self._beat.lost or self._heard.is_set():
            return True
        if time.monotonic() >= self._next_look:
            self._next_look = time.monotonic() + self._every
            try:
                return self._marked()
            except UNREACHABLE:
                return False  # Redis away for a moment: work on; the heartbeat guards the lease
        return False


class YieldCheck:
    """should_yield() of one run: an ask was heard on the YIELDS channel or (once per heartbeat,
    for a message that was missed) the job's ask key exists. Once asked, a run stays asked, and
    `owed` holds the job it was asked to yield to and its queue, read when the ask came (None if
    the ask had expired by then)."""

    def __init__(
        self, client: redis.Redis, job_id: str, heard: threading.Event, every: float
    ) -> None:
        self._client, self.job_id, self._heard, self._every = client, job_id, heard, every
        self._next_look = time.monotonic() + every
        self.asked = False
        self.owed: tuple[str, str] | None = None

    def __call__(self) -> bool:
        if not self.asked and self._look():
            self.asked = True
            self.owed = self._owed()
        return self.asked

    def _owed(self) -> tuple[str, str] | None:
        try:
            raw = self._client.get(ask_key(self.job_id))
        except UNREACHABLE:
            return None
        return None if raw is None else read_ask(raw)

    def _look(self) -> bool:
        if self._heard.is_set():
            return True
        if time.monotonic() >= self._next_look:
            self._next_look = time.monotonic() + self._every
            try:
                return bool(self._client.exists(ask_key(self.job_id)))
            except UNREACHABLE:
                return False
        return False
