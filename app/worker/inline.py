"""InlineExecutor: runs jobs in the worker's own process, for tests and for debugging a job
type under pdb. It has what a job needs (its context, setup once per type, typed input and
output, cooperative cancel, ctx.log and ctx.progress, an output folder) and none of what the
warm child adds: a job that hangs is not stopped, one that crashes takes the worker with it, and
its prints are not captured. Workers use JobChild."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from app.jobs import JobContext, Registry
from app.worker.calls import Call, Ended
from app.worker.job_process import Jobs
from app.worker.live import NO_EVENTS, JobEvents, lines_of


class InlineExecutor:
    """Runs each job in this process, in the calling thread."""

    def __init__(self, registry: Registry, device: object = None) -> None:
        self.registry, self.device = registry, device
        self._jobs = Jobs(registry)

    def start(self) -> None:
        """Nothing to start."""

    def run(
        self, call: Call, should_stop: Callable[[], bool], events: JobEvents = NO_EVENTS
    ) -> Ended:
        """Run the job to its end; should_stop() is what its ctx.cancelled reads, and each
        ctx.log and ctx.progress goes to events as it is called. The Ended names the job's
        output folder: the caller deletes it. Its seconds count from the end of the type's
        setup()."""
        began = time.monotonic()

        def clock_starts() -> None:
            nonlocal began
            began = time.monotonic()

        folder = Path(tempfile.mkdtemp(prefix="fairgpu-output-"))
        ctx = JobContext(
            call.task_id,
            call.gpu_id,
            self.device,
            time.time() + call.budget_s,
            should_stop,
            output_dir=folder,
            _log=lambda text: events.lines(lines_of("log", text, time.time())),
            _progress=events.progress,
        )
        try:
            reply = self._jobs.run(replace(call, output_dir=str(folder)), ctx, clock_starts)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # nobody else knows the folder
            raise
        return replace(reply.ended(time.monotonic() - began), output_dir=folder)

    def broken(self) -> str | None:
        """Never: there is no device to check."""
        return None

    def close(self) -> None:
        """Nothing to release."""
