"""InlineExecutor: runs jobs in the worker's own process, for tests and for debugging a job
type under pdb. It has what a job needs (its context, setup once per type, typed input and
output, cooperative cancel and preemption, ctx.log and ctx.progress, an output folder and a
checkpoint folder) and none of what the warm child adds: a job that hangs, or ignores an ask to
yield, is not stopped, one that crashes takes the worker with it, and its prints are not
captured. Workers use JobChild."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from app.jobs import JobContext, Registry
from app.worker.calls import Call, Ended, never
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
        self,
        call: Call,
        should_stop: Callable[[], bool],
        events: JobEvents = NO_EVENTS,
        should_yield: Callable[[], bool] = never,
    ) -> Ended:
        """Run the job to its end; should_stop() is what its ctx.cancelled reads and, for a
        preemptible call, should_yield() what its ctx.preempted does (once true, true for the
        rest of the run), and each ctx.log and ctx.progress goes to events as it is called. The
        Ended names the job's output folder: the caller deletes it. Its seconds count from the
        end of the type's setup()."""
        began = time.monotonic()

        def clock_starts() -> None:
            nonlocal began
            began = time.monotonic()

        folder = Path(tempfile.mkdtemp(prefix="fairgpu-output-"))
        scratch = None if call.checkpoint_dir else tempfile.mkdtemp(prefix="fairgpu-checkpoint-")
        call = replace(call, output_dir=str(folder), checkpoint_dir=scratch or call.checkpoint_dir)
        ctx = JobContext(
            call.task_id,
            call.gpu_id,
            self.device,
            time.time() + call.budget_s,
            should_stop,
            output_dir=folder,
            _log=lambda text: events.lines(lines_of("log", text, time.time())),
            _progress=events.progress,
            checkpoint_dir=Path(call.checkpoint_dir),
            preemptions=call.preemptions,
            _yield=_Latch(should_yield if call.preemptible else never),
        )
        try:
            reply = self._jobs.run(call, ctx, clock_starts)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # nobody else knows the folder
            raise
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        return replace(reply.ended(time.monotonic() - began), output_dir=folder)

    def broken(self) -> str | None:
        """Never: there is no device to check."""
        return None

    def close(self) -> None:
        """Nothing to release."""


class _Latch:
    """A flag read through a callable that, once it has said True, says True from then on, as
    the child's shared yield flag does: the ask to yield is never taken back."""

    def __init__(self, ask: Callable[[], bool]) -> None:
        self._ask, self._set = ask, False

    def __call__(self) -> bool:
        self._set = self._set or self._ask()
        return self._set
