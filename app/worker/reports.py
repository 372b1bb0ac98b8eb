"""LiveReports: the runner's JobEvents. What a running job says goes to Redis through the
JobRecorder, fenced by the run's lease token (a stale run writes nothing).

Every line goes to the job's log stream, in one write per poll: the logs endpoint has them all
(the newest MAX_LOG_LINES). The job's event stream, which live clients follow, gets at most
LOG_EVENTS_PER_S `log` events a second: the lines between two events go in the next one, its
newest EVENT_LINES (within EVENT_BYTES), and the rest are counted as dropped, in the event and
in the metric log_lines_dropped. Progress is written at most PROGRESS_PER_S times a second;
what the throttle held back is written at the end, so the latest progress is written last.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from functools import partial

from app.store import JobRecorder
from app.vtrr.celery_queue import UNREACHABLE
from app.worker.live import LogLine

log = logging.getLogger(__name__)

EVENT_LINES = 50  # the most lines one log event carries
EVENT_BYTES = 32 * 1024  # and the most text: 512 events of a job's stream stay a few MiB
PROGRESS_PER_S = 4.0


class LiveReports:
    """One run's reports, throttled and written to Redis. Call close() when the job has ended,
    before its end is recorded: it writes what the throttle held back."""

    def __init__(
        self,
        recorder: JobRecorder,
        job_id: str,
        token: str,
        *,
        log_events_per_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._recorder, self._job_id, self._token = recorder, job_id, token
        self._log_every, self._clock = 1.0 / log_events_per_s, clock
        self._held: deque[LogLine] = deque(maxlen=EVENT_LINES)  # the newest, for the next event
        self._held_count = 0  # every line since the last event
        self._progress: tuple[float, str] | None = None  # held back by the throttle
        self._next_event = self._next_progress = -math.inf
        self._stale = False  # another run holds the job: write nothing more
        #: moves the run's start in the fair queue's limits to now (FairQueue.began)
        self.hold_from_now: Callable[[], object] = lambda: None
        self._warned = False

    def began(self) -> None:
        """Record that the job began, later than its lease: its started_at is now, and what it
        holds against its account's max_held_gpu_seconds runs down from now."""
        self._write(partial(self._recorder.began, self._job_id, self._token))

        def hold() -> bool:
            self.hold_from_now()
            return True  # (its False says no limit counts the run: not a lost job)

        self._write(hold)

    def lines(self, batch: list[LogLine]) -> None:
        """Write the batch to the log stream, with a log event when one is due."""
        self._held.extend(batch)
        self._held_count += len(batch)
        due = self._held_count > 0 and self._clock() >= self._next_event
        if batch or due:
            self._write_lines(batch, event=due)
        if self._progress is not None and self._clock() >= self._next_progress:
            self._write_progress()

    def progress(self, fraction: float, message: str) -> None:
        """Write the progress now, or hold it until one is due."""
        self._progress = (fraction, message)
        if self._clock() >= self._next_progress:
            self._write_progress()

    def close(self) -> None:
        """Write the log event and the progress that the throttle held back."""
        if self._held_count:
            self._write_lines([], event=True)
        if self._progress is not None:
            self._write_progress()

    def _write_lines(self, batch: list[LogLine], *, event: bool) -> None:
        if not event:
            self._write(partial(self._recorder.log, self._job_id, self._token, batch))
            return
        shown = _newest(self._held)
        dropped = self._held_count - len(shown)
        self._held.clear()
        self._held_count = 0
        self._next_event = self._clock() + self._log_every
        write = partial(self._recorder.log, self._job_id, self._token, batch, event=shown)
        self._write(partial(write, dropped=dropped))

    def _write_progress(self) -> None:
        assert self._progress is not None
        fraction, message = self._progress
        self._progress = None
        self._next_progress = self._clock() + 1.0 / PROGRESS_PER_S
        self._write(partial(self._recorder.progress, self._job_id, self._token, fraction, message))

    def _write(self, write: Callable[[], bool]) -> None:
        """Write, unless the run has lost the job; Redis being away loses the report, never the
        job (the lease's heartbeat says whether the run still holds it)."""
        if self._stale:
            return
        try:
            self._stale = not write()
        except UNREACHABLE:
            if not self._warned:
                log.warning("Redis unreachable; the job's reports are lost meanwhile",
                            extra={"task_id": self._job_id})  # fmt: skip
                self._warned = True


def _newest(held: deque[LogLine]) -> list[LogLine]:
    """The newest held lines whose text fits in EVENT_BYTES, in their order."""
    shown: list[LogLine] = []
    size = 0
    for line in reversed(held):
        size += len(line.text.encode())
        if size > EVENT_BYTES:
            break
        shown.append(line)
    return shown[::-1]
