"""How a worker finds its host and its class of card, once, at start.

The host is WORKER_HOST, else the machine's hostname: Compose and Kubernetes set it to the node's
name, so that all cards of a machine share one host. The class is WORKER_GPU_CLASS where it is
set; else the class whose `match` the device's name contains; else the largest class whose
memory the card holds. A card that no class fits stops the worker at start, with one line that
names the card and the catalog. A CPU worker takes the catalog's first class.
"""

from __future__ import annotations

import socket
from typing import Protocol

from app.fleet.catalog import Catalog, GpuClass

#: Bytes in a catalog GB: vendors name cards in 10^9 bytes.
GB = 1_000_000_000


class FleetError(Exception):
    """The worker's class cannot be found: the message is one line for the operator."""


class HostSettings(Protocol):
    """The setting worker_host reads (app.settings.Settings has it)."""

    @property
    def worker_host(self) -> str | None: ...


def worker_host(settings: HostSettings) -> str:
    """WORKER_HOST, else this machine's hostname."""
    return settings.worker_host or socket.gethostname()


def _card(device_name: str, device_memory_bytes: int | None) -> str:
    memory = "" if device_memory_bytes is None else f" ({device_memory_bytes / GB:.1f} GB)"
    return f"{device_name!r}{memory}"


def _by_match(catalog: Catalog, device_name: str) -> GpuClass | None:
    name = device_name.lower()
    found = [c for c in catalog.classes if c.match and c.match.lower() in name]
    if not found:
        return None
    longest = max(len(c.match or "") for c in found)
    best = [c for c in found if len(c.match or "") == longest]
    if len(best) > 1:
        # Two equally specific matches: which card this is cannot be told from its name.
        raise FleetError(
            f"the GPU {device_name!r} matches the classes {best[0].name!r} and {best[1].name!r} "
            "equally (GPU_CLASSES' match): make one match longer, or set WORKER_GPU_CLASS"
        )
    return best[0]


def _by_memory(catalog: Catalog, device_memory_bytes: int) -> GpuClass | None:
    held = [c for c in catalog.classes if c.memory_gb * GB <= device_memory_bytes]
    # max keeps the first of equals: catalog order breaks a tie.
    return max(held, key=lambda c: c.memory_gb) if held else None


def worker_class(
    catalog: Catalog,
    device_name: str | None,
    device_memory_bytes: int | None,
    asked: str | None,
) -> GpuClass:
    """This worker's class: asked (WORKER_GPU_CLASS) where given, else found from its device
    (None: a CPU worker) through the catalog. FleetError where none fits."""
    if asked:
        if not catalog.declared:
            raise FleetError(f"WORKER_GPU_CLASS={asked!r} but GPU_CLASSES is unset")
        found = catalog.by_name(asked)
        if found is None:
            raise FleetError(
                f"WORKER_GPU_CLASS={asked!r} is no class of GPU_CLASSES: {catalog.describe()}"
            )
        return found
    if not catalog.declared or device_name is None:
        return catalog.first
    found = _by_match(catalog, device_name)
    if found is None and device_memory_bytes is not None:
        found = _by_memory(catalog, device_memory_bytes)
    if found is None:
        memory = "less memory than each" if device_memory_bytes is not None else "memory unknown"
        raise FleetError(
            f"the GPU {_card(device_name, device_memory_bytes)} fits no class of GPU_CLASSES "
            f"(no match, {memory}): {catalog.describe()}; set WORKER_GPU_CLASS or a class's match"
        )
    return found
