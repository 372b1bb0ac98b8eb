"""The checks of Settings' fields that are more than a bound: lists given comma-separated, the
queues a worker serves, Sentinels' addresses, prices in whole micro-units and the GPU catalog.
Each takes a field's value and returns it, or raises ValueError that names the problem; a bad
setting stops the process at start."""

from __future__ import annotations

from typing import Any

from app.fleet.catalog import Catalog
from app.models import KINDS, RECLAIM_QUEUE


def comma_separated(value: Any) -> Any:
    """A list setting given as one comma-separated string, split (blanks dropped)."""
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    return value


def known_queues(names: list[str]) -> list[str]:
    """WORKER_QUEUES names short, long or both."""
    unknown = [name for name in names if name not in (*KINDS, RECLAIM_QUEUE)]
    if not names or unknown:
        raise ValueError(f"{names!r}: use short, long or short,long")
    return names


def host_and_port(addresses: list[str]) -> list[str]:
    """Each of REDIS_SENTINELS is host:port."""
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{address!r}: a Sentinel is host:port")
    return addresses


def whole_micro_units(value: float) -> float:
    """A price has at most 6 decimals."""
    # Bills are kept in integer micro-units: a finer price would be rounded on every bill.
    if round(value, 6) != value:
        raise ValueError(f"{value!r}: a price has at most 6 decimals (micro-units)")
    return value


def gpu_catalog(value: str | None) -> str | None:
    """GPU_CLASSES reads as a catalog (app/fleet/catalog.py): inline JSON, or a JSON file."""
    Catalog.from_setting(value)  # CatalogError is a ValueError, naming the class and field
    return value
