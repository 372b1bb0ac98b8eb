"""How a running job hears that it should stop, within a second and without polling Redis.

revoke.lua publishes a job's id on the STOPS channel when its owner (or an operator) asks a
running job to stop. Each worker keeps one subscription to that channel, in a thread, and sets
the flag of the job it is running. A message can be missed (pub/sub does not queue them while
the connection is down), so the runner also reads the job's cancel mark once per heartbeat:
a cancel always arrives, within HEARTBEAT_SECONDS at worst. StopCheck is the one question a
run's executor asks: should this run stop now?
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.client import PubSub

from app.store.keys import STOPS
from app.vtrr import Heartbeat
from app.vtrr.celery_queue import UNREACHABLE  # Redis not reached: not the job's failure
from app.vtrr.wire import as_text

log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.2  # how long the listening thread waits for a message before it looks again


class StopListener:
    """One worker's subscription to the STOPS channel; `watch` a job while it runs."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._watched: dict[str, threading.Event] = {}
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
                pubsub.subscribe(STOPS)
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
                self._heard(as_text(message["data"]))

    def _heard(self, job_id: str) -> None:
        with self._lock:
            flag = self._watched.get(job_id)
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
