"""burn: the stand-in workload, kept as a job type. It keeps its device busy for its whole
budget (`duration_s`): bf16 matrix products on a GPU, a sleep on a CPU worker. The old request
body `{"kind", "duration_s"}` is a burn job."""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field

from app.jobs.context import JobCancelledError, JobContext
from app.jobs.registry import job
from app.worker import gpu


class BurnIn(BaseModel):
    """Nothing: a burn job runs for its duration_s."""

    model_config = ConfigDict(extra="forbid")


class BurnOut(BaseModel):
    """How long it ran, and the TFLOP/s it reached on a GPU."""

    seconds: float
    tflops: float | None = Field(None, description="bf16 TFLOP/s; null on a CPU worker")


@job(
    name="burn",
    queue="short",
    max_duration_s=3000,
    description="Keeps its GPU busy (bf16 matmul; a sleep on a CPU worker) for duration_s.",
)
def burn(ctx: JobContext, inp: BurnIn) -> BurnOut:
    """Keeps its GPU busy for duration_s."""
    device = gpu.Device(ctx.gpu_id)
    outcome = gpu.run(device, max(0.0, ctx.deadline - time.time()), lambda: ctx.cancelled)
    if outcome.stopped:
        raise JobCancelledError(f"stopped after {outcome.seconds:.1f} s")
    return BurnOut(seconds=outcome.seconds, tflops=outcome.tflops)
