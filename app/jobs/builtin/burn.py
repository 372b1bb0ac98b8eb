"""burn: the stand-in workload, kept as a job type. It keeps its device busy for its whole
budget (`duration_s`): on a GPU it multiplies bf16 matrices until its time has passed and
reports the TFLOP/s it reached; on a CPU worker it sleeps, so that scheduling behaves the same
on any machine. The old request body `{"kind", "duration_s"}` is a burn job. torch is imported
only for a GPU."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.jobs.context import JobCancelledError, JobContext
from app.jobs.registry import job

MATRIX_N = 8192  # 2 * 8192^3 = 1.1 TFLOP per product: milliseconds on a modern GPU
CHECK_EVERY_S = 0.5  # how often a running job looks at its stop flag


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
    on_gpu = ctx.gpu_id is not None
    outcome = run(on_gpu, max(0.0, ctx.deadline - time.time()), lambda: ctx.cancelled)
    if outcome.stopped:
        raise JobCancelledError(f"stopped after {outcome.seconds:.1f} s")
    return BurnOut(seconds=outcome.seconds, tflops=outcome.tflops)


@dataclass(frozen=True)
class Outcome:
    """How a workload ended: seconds it ran, TFLOP/s reached (GPU only), stopped early or not."""

    seconds: float
    tflops: float | None
    stopped: bool


def run(
    on_gpu: bool, duration_s: float, should_stop: Callable[[], bool] = lambda: False
) -> Outcome:
    """Keep the worker's GPU busy (or, on a CPU worker, wait) for duration_s seconds, or until
    should_stop() says so."""
    if not on_gpu:
        return _sleep(duration_s, should_stop)
    return _matmul(duration_s, should_stop)


def _sleep(duration_s: float, should_stop: Callable[[], bool]) -> Outcome:
    start = time.monotonic()
    end = start + duration_s
    while (left := end - time.monotonic()) > 0:
        if should_stop():
            return Outcome(time.monotonic() - start, None, stopped=True)
        time.sleep(min(left, CHECK_EVERY_S))  # the job's work is to wait: this is the workload
    return Outcome(time.monotonic() - start, None, stopped=False)


def _matmul(duration_s: float, should_stop: Callable[[], bool]) -> Outcome:
    return matmul("cuda", MATRIX_N, duration_s, should_stop)


def matmul(device: str, n: int, duration_s: float, should_stop: Callable[[], bool]) -> Outcome:
    """Multiply two n x n bf16 matrices on device (a torch device name) again and again until
    duration_s has passed since the call (making the matrices counts: a job ends at its
    duration_s, within a last few products) or should_stop() says so; the TFLOP/s counts
    finished products only."""
    end = time.monotonic() + duration_s
    import torch

    torch_any: Any = torch
    on_gpu = device.startswith("cuda")

    def synchronize() -> None:
        if on_gpu:  # GPU work is queued: wait for it, so the clock measures finished work
            torch_any.cuda.synchronize()

    a = torch_any.randn(n, n, device=device, dtype=torch_any.bfloat16)
    b = torch_any.randn(n, n, device=device, dtype=torch_any.bfloat16)
    synchronize()
    start = time.monotonic()
    next_check, products, stopped = start + CHECK_EVERY_S, 0, False
    while True:
        a @ b
        products += 1
        if products % 8 == 0:
            synchronize()
            now = time.monotonic()
            if now >= end:
                break
            if now >= next_check:
                next_check = now + CHECK_EVERY_S
                if should_stop():
                    stopped = True
                    break
    synchronize()
    seconds = time.monotonic() - start
    return Outcome(seconds, 2 * n**3 * products / seconds / 1e12, stopped)
