"""InlineExecutor: runs jobs in the worker's own process, for tests and for debugging a job
type under pdb. It has what a job needs (its context, setup once per type, typed input and
output, cooperative cancel) and none of what the warm child adds: a job that hangs is not
stopped, and one that crashes takes the worker with it. Workers use JobChild."""

from __future__ import annotations

import time
from collections.abc import Callable

from app.jobs import JobContext, Registry
from app.jobs.registry import Runnable
from app.worker.child import Call, Ended, run_call


class InlineExecutor:
    """Runs each job in this process, in the calling thread."""

    def __init__(self, registry: Registry, device: object = None) -> None:
        self.registry, self.device = registry, device
        self._runnables: dict[str, Runnable] = {}

    def start(self) -> None:
        """Nothing to start."""

    def run(self, call: Call, should_stop: Callable[[], bool]) -> Ended:
        """Run the job to its end; should_stop() is what its ctx.cancelled reads."""
        began = time.monotonic()
        ctx = JobContext(
            call.task_id, call.gpu_id, self.device, time.time() + call.budget_s, should_stop
        )
        reply = run_call(self.registry, self._runnables, call, ctx)
        return reply.ended(time.monotonic() - began)

    def close(self) -> None:
        """Nothing to release."""
