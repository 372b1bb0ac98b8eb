"""RunLease: the lease of the run in hand, as the worker renews it and its child's watchdog
watches it (app/worker/watchdog.py).

The worker knows when the call that leased the job was sent (the drain's step, which leased and
started it in one call: Started.leased_at); where it does not (a retry's run, a job taken by
name) it renews the lease once as the run starts. Then the heartbeat renews it. Each lease or
renewal that Redis granted tells the executor the time by which the run must have stopped: when
that call was sent, plus the lease, less the watchdog's margin. A lease found gone at the start
gets a time already past: the run is stopped as soon as it begins. A renewal refused (the lease
went to another run: reclaimed, released, or its queue dropped) is a lost lease too: the run's
stop check (app/worker/stops.py) stops it, and its end records nothing (end_reason.LEASE_LOST,
app/worker/ends.py). A run stopped for its lease
(its child died after that time: its worker was frozen or cut off from Redis meanwhile) is
given up: its lease is made to lapse now and reclaimed, so that its job goes back in line,
PENDING, at once (the reclaim's hook), instead of being acked as if it had ended; nothing of its
end is recorded, and the job runs again.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Protocol

from app.settings import Settings
from app.vtrr import FairQueue, Heartbeat
from app.worker.calls import Ended
from app.worker.watchdog import margin_s

log = logging.getLogger(__name__)
#: How far ahead a lapse is set to come (the fair queue refuses 0): at once, in effect.
LAPSE_NOW_S = 1e-6


class Watched(Protocol):
    """What runs the job (the runner's Executor): told by when the run must have stopped."""

    def must_stop_by(self, at: float) -> None:
        """The running job must have stopped by `at` (time.monotonic()) unless told later."""
        ...


class LeaseLapsedError(Exception):
    """The run was stopped because its lease could not be renewed in time; its job is back in
    line, and this run records nothing (the message: what happened, for the worker's log)."""


class RunLease:
    """One run's lease: renewed at the start and by the heartbeat (renewed), lapsed or not."""

    def __init__(
        self,
        queue: FairQueue,
        job_id: str,
        token: str,
        settings: Settings,
        executor: Watched,
    ) -> None:
        self._queue, self._job_id, self._token = queue, job_id, token
        self._margin = margin_s(settings.lease_seconds, settings.heartbeat_seconds)
        self._stop_by = executor.must_stop_by
        self.deadline = -math.inf  # (until the start: a heartbeat's renewal may come first)
        #: Told after each renewal granted (the heartbeat's look at the run's checkpoint).
        self.on_renewed: Callable[[], None] = lambda: None
        self._beat: Heartbeat | None = None

    def heartbeat(self, every: float) -> Heartbeat:
        """The run's heartbeat, renewing the lease every `every` seconds (a context manager)."""
        self._beat = Heartbeat(self._queue, self._job_id, self._token, every, self.renewed)
        return self._beat

    def lost(self) -> bool:
        """Whether a renewal was refused: the lease belongs to another run now (or none)."""
        return self._beat is not None and self._beat.lost

    def start(self, leased_at: float | None) -> None:
        """The run starts under a lease granted by a call sent at leased_at (time.monotonic()),
        or, where that is not known, renewed now (a lease found gone: the run must stop at
        once). Redis unreachable: raised, and the job runs again once its lease has lapsed."""
        if leased_at is not None:
            self.renewed(leased_at)
            return
        sent = time.monotonic()
        if self._queue.extend(self._job_id, self._token):
            self.renewed(sent)
        else:
            self.deadline = -math.inf
            self._stop_by(self.deadline)

    def renewed(self, sent: float) -> None:
        """A renewal sent at `sent` (time.monotonic()) was granted (the Heartbeat's on_renewed);
        the latest one counts, whichever is told first."""
        self.deadline = max(self.deadline, sent + self._queue.lease_seconds - self._margin)
        self._stop_by(self.deadline)
        self.on_renewed()

    def lapsed(self) -> bool:
        """Whether the time by which the run had to stop has passed: the lease may be gone."""
        return time.monotonic() >= self.deadline

    def check(self, ended: Ended) -> None:
        """LeaseLapsedError, once its lease is given up (give_up), for a run stopped for its
        lease: it died past the time it had to stop by."""
        if ended.end == "crashed" and self.lapsed():
            log.warning(
                "lease lapsed: the run was stopped, not renewed in time; the job runs again",
                extra={"task_id": self._job_id},
            )
            self.give_up()
            raise LeaseLapsedError("lease lapsed: the job runs again")

    def give_up(self) -> None:
        """Make the lease lapse now and reclaim it, unless another run holds it already (the
        reclaim makes the job PENDING, at the front of its account's line)."""
        if self._queue.extend(self._job_id, self._token, LAPSE_NOW_S):
            self._queue.reclaim()
