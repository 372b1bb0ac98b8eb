"""The device probe: the one seam through which the job child looks at its GPU.

The child asks it whether the device still works (a sticky CUDA error: a synchronize or a tiny
kernel fails), how much memory the jobs' tensors still hold, what a job's peak was, and whether
an exception means the device ran out of memory. CudaProbe answers for a GPU worker,
NoDeviceProbe for a CPU worker; DEVICE_PROBE names another (a site's own check, or a test's
probe that reports failure, which is how the CUDA-only decisions are tested without a GPU).

A probe is built in the worker and handed to the spawned child, so it must pickle; it is used in
the child only. Only `check(init=True)`, the fresh child's probe, may initialise CUDA: a child
whose jobs never touched the device is left without a context.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

#: The elements the fresh child's probe kernel adds up on the device.
PROBE_ELEMENTS = 1024


class DeviceProbe(Protocol):
    """What the job child asks of its device between jobs."""

    def check(self, *, init: bool) -> str | None:
        """None while the device works, else why it does not. init=False must not initialise
        the device where no job has."""
        ...

    def reset_peak(self) -> None:
        """Start counting a job's peak memory from now."""
        ...

    def peak(self) -> int | None:
        """The most memory the device held since reset_peak (bytes); None: not measured."""
        ...

    def release(self) -> int | None:
        """Free the allocator's cache, then the bytes the process's tensors still hold; None
        where the device is not in use in this process."""
        ...

    def out_of_memory(self, exc: BaseException) -> bool:
        """Whether the job's exception says the device ran out of memory."""
        ...


class NoDeviceProbe:
    """A CPU worker's probe: there is no device to break or to leak on."""

    def check(self, *, init: bool) -> str | None:
        """Always usable."""
        return None

    def reset_peak(self) -> None:
        """Nothing to count."""

    def peak(self) -> int | None:
        """Not measured."""
        return None

    def release(self) -> int | None:
        """Nothing held."""
        return None

    def out_of_memory(self, exc: BaseException) -> bool:
        """A CPU job's MemoryError is an exception like any other."""
        return False


class CudaProbe:
    """A GPU worker's probe, through torch (imported in the child only, on first use)."""

    def __init__(self, device: str = "cuda:0") -> None:
        # CUDA_VISIBLE_DEVICES has pinned the worker's card: it is index 0 in the child
        self.device = device

    def check(self, *, init: bool) -> str | None:
        """Synchronize, then add up a small tensor on the device and check the sum: a context
        broken by an earlier kernel (a device-side assert, an illegal address) fails either."""
        torch = _torch()
        if not init and not torch.cuda.is_initialized():
            return None
        try:
            torch.cuda.synchronize(self.device)
            total = torch.ones(PROBE_ELEMENTS, device=self.device).sum().item()
        except Exception as exc:  # any error here means the device cannot run the next job
            return _first_line(exc)
        if total != PROBE_ELEMENTS:
            return f"the probe kernel added {PROBE_ELEMENTS} ones and got {total}"
        return None

    def reset_peak(self) -> None:
        """Reset torch's peak counter, where CUDA is in use."""
        torch = _torch()
        if torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int | None:
        """torch's peak of allocated memory; None where CUDA was never initialised."""
        torch = _torch()
        if not torch.cuda.is_initialized():
            return None
        return int(torch.cuda.max_memory_allocated(self.device))

    def release(self) -> int | None:
        """Empty torch's cache and say what its tensors still hold; None where CUDA was never
        initialised."""
        torch = _torch()
        if not torch.cuda.is_initialized():
            return None
        torch.cuda.empty_cache()
        return int(torch.cuda.memory_allocated(self.device))

    def out_of_memory(self, exc: BaseException) -> bool:
        """torch's OutOfMemoryError (CUDA's allocator raises it)."""
        torch = _torch()
        kind = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
        return isinstance(exc, kind)


def _torch() -> Any:
    import torch

    return torch


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def probe_for(gpu_id: int | None, custom: str | None = None) -> DeviceProbe:
    """The probe of a worker on this device: `custom` (DEVICE_PROBE, "module:callable", called
    with the gpu id) when set, else CUDA's for a GPU and none for the CPU."""
    if custom:
        module_name, _, attribute = custom.partition(":")
        factory = getattr(importlib.import_module(module_name), attribute)
        probe: DeviceProbe = factory(gpu_id)
        return probe
    return NoDeviceProbe() if gpu_id is None else CudaProbe()
