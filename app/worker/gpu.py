"""The device a worker drives: CUDA_VISIBLE_DEVICES names one device, or none for a CPU worker;
more than one is refused (a job of several cards sees them in a child of its own: see_cards).
torch is an optional extra: without it a worker is a CPU worker. (The `burn` job type's workload
is app/jobs/builtin/burn.py's.)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass


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


#: What CUDA numbers devices by in a child of several cards: the order nvidia-smi and the host's
#: ids use, so that CUDA_VISIBLE_DEVICES="3,5" means the cards numbered 3 and 5 there.
DEVICE_ORDER = "PCI_BUS_ID"


def see_cards(gpu_ids: tuple[int, ...] | None) -> None:
    """Make exactly these cards visible to CUDA in this process, in order (cuda:0 the first);
    None leaves the worker's own card, which the environment names already. Call it before
    anything initialises CUDA: CUDA reads both variables once, then."""
    if gpu_ids is None:
        return
    os.environ["CUDA_DEVICE_ORDER"] = DEVICE_ORDER
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpu_ids))
