"""InlineExecutor: runs jobs in the worker's own process, for tests and for debugging a job
type under pdb. It has what a job needs (its context, setup once per type, typed input and
output, cooperative cancel and preemption, ctx.log, ctx.progress and ctx.note, an output folder
and a checkpoint folder) and none of what the warm child adds: a job that hangs, or ignores an
ask to yield, is not stopped, one that crashes takes the worker with it, and its prints are not
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
from app.worker.deadline import TIMEOUT_TOLERANCE_S, Deadline
from app.worker.job_process import Jobs
from app.worker.live import NO_EVENTS, JobEvents, lines_of


class InlineExecutor:
    """Runs each job in this process, in the calling thread."""

    def __init__(
        self, registry: Registry, device: object = None, tolerance_s: float = TIMEOUT_TOLERANCE_S
    ) -> None:
        self.registry, self.device, self.tolerance_s = registry, device, tolerance_s
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
        end of the type's setup(); past its budget, ctx.cancelled turns true, and a run that
        ends past it is a timeout (app/worker/deadline.py), though nothing kills it here."""
        began: float | None = None
        stop = Deadline()  # no kill here: only the asks, and the verdict on a run past its budget

        def clock_starts() -> None:
            nonlocal began
            began = time.monotonic()
            if self._jobs.set_up:
                events.began()  # its type's setup() ran first: the job began later than its run

        def stopped() -> bool:
            now = time.monotonic()
            if not stop.final and should_stop():
                stop.ask("cancel", now, 0.0)
            if began is not None and now >= began + call.budget_s + self.tolerance_s:
                stop.ask("timeout", now, 0.0)  # its seconds are up: it sees ctx.cancelled
            return stop.final

        folder = Path(tempfile.mkdtemp(prefix="fairgpu-output-"))
        scratch = None if call.checkpoint_dir else tempfile.mkdtemp(prefix="fairgpu-checkpoint-")
        call = replace(call, output_dir=str(folder), checkpoint_dir=scratch or call.checkpoint_dir)
        ctx = JobContext(
            call.task_id,
            call.gpu_id,
            self.device,
            time.time() + call.budget_s,
            stopped,
            output_dir=folder,
            _log=lambda text: events.lines(lines_of("log", text, time.time())),
            _progress=events.progress,
            checkpoint_dir=Path(call.checkpoint_dir),
            preemptions=call.preemptions,
            preemptible=call.preemptible,
            _yield=_Latch(should_yield if call.preemptible else never),
            devices=call.devices,
        )
        try:
            reply = self._jobs.run(call, ctx, clock_starts)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # nobody else knows the folder
            raise
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        ended = reply.ended(0.0 if began is None else time.monotonic() - began)
        if began is not None:
            ended = stop.overran(ended, call.budget_s, self.tolerance_s)
        return replace(ended, output_dir=folder)

    def must_stop_by(self, at: float) -> None:
        """Nothing to watch: the job runs in the worker's own process, which a freeze or a kill
        stops with it."""

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
