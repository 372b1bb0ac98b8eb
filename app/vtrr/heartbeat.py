"""Heartbeat: renew a lease from a background thread while its item runs.

    with Heartbeat(queue, lease.task_id, lease.token, every=10) as beat:
        work(should_stop=lambda: beat.lost)

A short lease renewed this way protects a job of any length, and a dead worker's item comes back
within one lease period. Once a renewal is refused (the lease was reclaimed and handed on), `lost`
turns True and the thread stops: the run no longer owns the item and should wind down.
`on_renewed`, if given, hears the time.monotonic() at which each renewal that Redis granted was
sent: the lease cannot expire before that time plus the lease's length (Redis counts it from
when the renewal reached it), so a watchdog can stop the run before then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

from redis.exceptions import RedisError

log = logging.getLogger(__name__)


class Renewable(Protocol):
    """What a heartbeat needs of a queue."""

    lease_seconds: float

    def extend(self, task_id: str, token: str, seconds: float | None = None) -> bool:
        """Renew a lease; False when it is no longer held."""
        ...


class Heartbeat:
    """A thread that extends one lease every `every` seconds until stopped or refused."""

    def __init__(
        self,
        queue: Renewable,
        task_id: str,
        token: str,
        every: float,
        on_renewed: Callable[[float], None] | None = None,
    ) -> None:
        if not 0 < every < queue.lease_seconds:
            raise ValueError(f"every={every} must be positive and below the lease's length")
        self._queue, self._task_id, self._token, self._every = queue, task_id, token, every
        self._on_renewed = on_renewed
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{task_id}", daemon=True)

    @property
    def lost(self) -> bool:
        """Whether a renewal was refused: the lease now belongs to someone else."""
        return self._lost.is_set()

    def _beat(self) -> None:
        while not self._stop.wait(self._every):
            try:
                sent = time.monotonic()
                held = self._queue.extend(self._task_id, self._token)
            except RedisError:
                # Redis is away: keep trying; the lease may still outlive the outage.
                log.warning("heartbeat of %s could not reach Redis", self._task_id, exc_info=True)
                continue
            if not held:
                log.warning("lease of %s was taken back; this run no longer owns it", self._task_id)
                self._lost.set()
                return
            if self._on_renewed is not None:
                self._on_renewed(sent)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
