"""CheckpointWatch: what a preemptible run has done by its last whole checkpoint write, noted on
its job while it runs, so that a run lost with its worker is billed for the work its rerun
resumes from.

At each heartbeat (look) the worker reads when the run's checkpoint copy last changed (the
newest modification time of its files: a job writes each whole, write then rename); when that
is newer than at the last look, it notes on the job, fenced by the run's lease token
(JobRecorder.checkpointed): the run's seconds up to that write, and the charge for all the
job's runs through them, priced as the run's end would be (RunEnds.price: pricing stays in one
place). If the run is lost, the reclaim adds those seconds to the job's earlier runs' and keeps
that charge for an end without another run (store/lua/runs.lua lose_run); a run that ends
records its own seconds, and the note goes. The run's seconds count from its start as the
worker sees it, or from when its child said the job began (its type set up), as its bill does.
A write's time is read from the file system's clock and kept between the two looks around it,
so a clock that differs cannot move it out of the time the worker saw it happen in.

It stands between the executor and the run's reports (JobEvents), to learn when the job began.
Only a copy used in place (a local checkpoint) is watched: an S3 one is stored at the run's end
only, so a lost run leaves nothing there to resume from, and nothing to bill.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from app.models import Kind
from app.store import JobRecorder, Started
from app.vtrr.celery_queue import UNREACHABLE  # Redis not reached: not the job's failure
from app.worker.calls import Ended
from app.worker.ends import RunEnds
from app.worker.live import JobEvents, LogLine

log = logging.getLogger(__name__)


class CheckpointWatch:
    """One run's checkpoint copy, looked at each heartbeat; the run's JobEvents, passed on."""

    def __init__(
        self,
        reports: JobEvents,
        run: tuple[Kind, str, str, Started],
        recorder: JobRecorder,
        ends: RunEnds,
        folder: Path | None,
    ) -> None:
        self._reports, self._recorder, self._ends, self._folder = reports, recorder, ends, folder
        self._kind, self._job_id, self._token, self._started = run
        self._began = time.time()  # the run's start as the worker sees it
        self._seen = self._looked = self._began

    def began(self) -> None:
        """The job began later than its run's start (its type was set up): its seconds count
        from now."""
        self._began = time.time()
        self._reports.began()

    def lines(self, batch: list[LogLine]) -> None:
        """Passed on to the run's reports."""
        self._reports.lines(batch)

    def progress(self, fraction: float, message: str) -> None:
        """Passed on to the run's reports."""
        self._reports.progress(fraction, message)

    def look(self) -> None:
        """At a heartbeat: note the run's work on its job if its checkpoint changed since the
        last look. Redis unreachable: the next look tries again."""
        if self._folder is None:
            return
        now, since = time.time(), self._looked
        self._looked = now
        written = newest_write(self._folder)
        if written is None or written <= self._seen:
            return
        self._seen = written
        at = min(max(written, since), now)  # within the looks around it, whatever the clocks
        seconds = max(0.0, at - self._began)
        charge = self._ends.price(self._kind, self._started, Ended("preempted", seconds))
        try:
            self._recorder.checkpointed(self._job_id, self._token, seconds, charge)
        except UNREACHABLE:
            self._seen = since  # not noted: the next look notes it
            log.warning("Redis unreachable: checkpoint not noted", extra={"task_id": self._job_id})


def newest_write(folder: Path) -> float | None:
    """The newest modification time of the regular files under the folder (no link followed),
    or None when it holds none."""
    newest: float | None = None
    todo = [str(folder)]
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue  # gone meanwhile, or replaced by a link: nothing of it counts
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                    newest = mtime if newest is None else max(newest, mtime)
            except OSError:
                continue
    return newest
