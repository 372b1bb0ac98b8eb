"""The device a worker drives, and the workload a job runs on it.

A worker owns at most one GPU: CUDA_VISIBLE_DEVICES names one device, or none for a CPU worker.
On a GPU the job multiplies bf16 matrices on that device until its duration has passed and
reports the TFLOP/s it reached; without one it sleeps for its duration, so the scheduling
behaves the same on any machine. torch is an optional extra and is only imported for a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MATRIX_N = 8192  # 2 * 8192^3 = 1.1 TFLOP per product: milliseconds on a modern GPU
CHECK_EVERY_S = 0.5  # how often a running job looks at its stop flag


class DeviceError(RuntimeError):
    """The environment does not describe exactly one usable device (or none)."""


@dataclass(frozen=True)
class Device:
    """What a worker runs on: a GPU (its id as the host numbers it) or the CPU."""

    gpu_id: int | None

    @property
    def label(self) -> str:
        """`gpu<N>` or `cpu`, the first part of the worker's name."""
        return "cpu" if self.gpu_id is None else f"gpu{self.gpu_id}"


CPU = Device(gpu_id=None)


def visible_devices(env: Mapping[str, str]) -> list[str] | None:
    """The devices CUDA_VISIBLE_DEVICES names; None when it is unset."""
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    names = [d.strip() for d in raw.split(",") if d.strip()]
    # CUDA stops at the first invalid entry; "-1" is the usual way to hide every device.
    return [] if not names or names[0].startswith("-") else names


def choose_device(env: Mapping[str, str], cuda_count: Callable[[], int]) -> Device:
    """The one device this worker may use, or DeviceError when there is more than one.

    cuda_count tells how many CUDA devices torch sees (0 without torch or without a GPU).
    """
    names = visible_devices(env)
    if names is not None and len(names) > 1:
        raise DeviceError(
            f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']!r} names {len(names)} devices; "
            "a fairgpu worker drives exactly one: start one worker per GPU"
        )
    if names == []:
        return Device(gpu_id=None)
    seen = cuda_count()
    if names is None:
        if seen > 1:
            raise DeviceError(
                f"{seen} GPUs are visible and CUDA_VISIBLE_DEVICES is unset; "
                "set it to one device per worker"
            )
        return Device(gpu_id=0 if seen == 1 else None)
    if seen < 1:
        raise DeviceError(
            f"CUDA_VISIBLE_DEVICES={names[0]!r} but no CUDA device is usable "
            "(is the torch extra installed, with a CUDA build?)"
        )
    if not names[0].isdigit():
        raise DeviceError(f"CUDA_VISIBLE_DEVICES={names[0]!r}: use the device's index")
    return Device(gpu_id=int(names[0]))


def torch_cuda_count() -> int:
    """How many CUDA devices torch sees; 0 when torch is not installed."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


@dataclass(frozen=True)
class Outcome:
    """How a workload ended: seconds it ran, TFLOP/s reached (GPU only), stopped early or not."""

    seconds: float
    tflops: float | None
    stopped: bool


def run(
    device: Device, duration_s: float, should_stop: Callable[[], bool] = lambda: False
) -> Outcome:
    """Keep the device busy for duration_s seconds, or until should_stop() says so."""
    if device.gpu_id is None:
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
    duration_s has passed or should_stop() says so; the TFLOP/s counts finished products only."""
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
    end, next_check, products, stopped = start + duration_s, start + CHECK_EVERY_S, 0, False
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
