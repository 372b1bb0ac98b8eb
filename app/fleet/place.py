"""Where a worker stands in the fleet: its host, its class of card, the class's memory and price.

A worker finds its place once, at start (app/worker/main.py), and says it in every heartbeat
(app/worker/presence.py); the runner names its host and class in a job's result and the bill
prices the run by the class. Memory is the catalog's, never the device's own reading: two cards
of one class place the same jobs. Without GPU_CLASSES the class has no name, no memory limit and
price 1.0, so that placement and charges are what they were before the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.fleet.catalog import Catalog
from app.fleet.worker_class import FleetError, worker_class, worker_host

__all__ = ["FleetError", "PlaceSettings", "WorkerPlace", "place_of"]


class PlaceSettings(Protocol):
    """The settings place_of reads (app.settings.Settings has them)."""

    @property
    def gpu_classes(self) -> str | None: ...

    @property
    def worker_host(self) -> str | None: ...

    @property
    def worker_gpu_class(self) -> str | None: ...


@dataclass(frozen=True)
class WorkerPlace:
    """One worker's place: memory_gb is None, and gpu_class too, without a catalog."""

    host: str
    gpu_class: str | None
    memory_gb: float | None
    price: float

    def describe(self) -> str:
        """The place in a few words, for the worker's start line."""
        if self.gpu_class is None:
            return f"host {self.host}, no GPU class (GPU_CLASSES is unset)"
        memory = f"{self.memory_gb:g} GB"
        return f"host {self.host}, class {self.gpu_class} ({memory}, price {self.price:g})"


def place_of(
    settings: PlaceSettings, device_name: str | None, device_memory_bytes: int | None
) -> WorkerPlace:
    """The place of a worker on this device (device_name None: a CPU worker). FleetError, one
    line for the operator, where the card fits no class or WORKER_GPU_CLASS names none; the
    catalog's own CatalogError where GPU_CLASSES cannot be read."""
    catalog = Catalog.from_setting(settings.gpu_classes)
    found = worker_class(catalog, device_name, device_memory_bytes, settings.worker_gpu_class)
    memory = found.memory_gb if catalog.declared else None  # the single class's is infinite
    return WorkerPlace(worker_host(settings), found.name, memory, found.price)
