"""The job types of the GPU check (JOB_MODULES=scripts.benchkit.gpu_jobs): one per fault a job
can leave on its GPU, one that reports what its child holds, and one that does nothing (for the
dispatch gap). torch is imported inside the jobs: the API loads this module for the schemas
only. None of them belongs in a real deployment: they break the device on purpose.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.jobs import JobContext, job

GIB = 1 << 30
#: What gpu-leak keeps referenced, in a module global, as a careless job type would.
_kept: list[Any] = []


class Nothing(BaseModel):
    """No input, or no output."""

    model_config = ConfigDict(extra="forbid")


class Gib(BaseModel):
    """How much device memory to take."""

    model_config = ConfigDict(extra="forbid")

    gib: int = Field(ge=1, le=4096)


class Held(BaseModel):
    """What the child that ran the job holds on its device."""

    pid: int
    cuda_initialized: bool
    allocated_bytes: int


def _held() -> Held:
    """The child's pid and torch's allocated bytes, without initialising CUDA (none without
    torch: a --cpu check may run without it)."""
    try:
        import torch
    except ImportError:
        return Held(pid=os.getpid(), cuda_initialized=False, allocated_bytes=0)

    on = bool(torch.cuda.is_initialized())
    allocated = int(torch.cuda.memory_allocated()) if on else 0
    return Held(pid=os.getpid(), cuda_initialized=on, allocated_bytes=allocated)


@job(name="gpu-memory", description="Reports its child's pid and allocated GPU memory.")
def gpu_memory(ctx: JobContext, inp: Nothing) -> Held:
    """Reads torch's counters only: it never touches the device itself."""
    return _held()


@job(name="gpu-leak", description="Keeps gib GiB of device memory referenced in a global.")
def gpu_leak(ctx: JobContext, inp: Gib) -> Held:
    """Allocates and keeps the memory after it returns: a leak for every later job."""
    import torch

    _kept.append(torch.ones(inp.gib * GIB, dtype=torch.uint8, device=ctx.device))
    return _held()


@job(name="gpu-assert", description="Indexes out of range on the device: a device-side assert.")
def gpu_assert(ctx: JobContext, inp: Nothing) -> Nothing:
    """On a GPU the kernel's assert leaves the CUDA context broken; on a CPU it is an
    IndexError like any other."""
    import torch

    values = torch.zeros(8, device=ctx.device)
    where = torch.tensor([1 << 20], device=ctx.device)
    values[where] += 1
    if values.is_cuda:
        torch.cuda.synchronize()
    return Nothing()


class Blocks(BaseModel):
    """Blocks of device memory to take, one after the other."""

    model_config = ConfigDict(extra="forbid")

    gib: int = Field(ge=1, le=1024, description="the size of each block")
    blocks: int = Field(ge=1, le=1024, description="the most blocks to take")


@job(name="gpu-oom", description="Takes blocks of device memory until the device has no more.")
def gpu_oom(ctx: JobContext, inp: Blocks) -> Held:
    """Raises torch's OutOfMemoryError once the card is full (its peak is then about the card's
    memory); the blocks are the job's own, freed when it ends."""
    import torch

    taken = [torch.empty(inp.gib * GIB, dtype=torch.uint8, device=ctx.device)]
    while len(taken) < inp.blocks:
        taken.append(torch.empty(inp.gib * GIB, dtype=torch.uint8, device=ctx.device))
    return _held()


@job(name="noop", description="Returns at once: the time between two jobs is all there is.")
def noop(ctx: JobContext, inp: Nothing) -> Nothing:
    """Nothing."""
    return Nothing()
