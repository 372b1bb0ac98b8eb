"""How a mixed fleet meets the fair queues: each class of card is a kind of consumer of the
queues (app/vtrr/pool.py), and a job names the classes it may run on as its item's kinds.

Only a fleet of two classes or more is mixed. Without a catalog, or with one class, no item
names a kind and no worker has one: the queues run exactly as before the catalog, at the same
cost. In a mixed fleet every job names its classes (all of the catalog's where it needs none in
particular), so that each one waits in the line of the cards that may run it, and a worker of
class C takes its triggers from the Celery queues `short.C` and `long.C`.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.fleet.catalog import Catalog
from app.models import KINDS
from app.vtrr.celery_task import kind_celery_queue


def mixed(catalog: Catalog) -> bool:
    """Whether the catalog makes a mixed fleet: two classes or more."""
    return catalog.declared and len(catalog.classes) > 1


def queue_kind(catalog: Catalog, gpu_class: str | None) -> str | None:
    """The kind of consumer a worker of this class is in the fair queues; None where the fleet
    is not mixed (or the worker has no class)."""
    return gpu_class if mixed(catalog) else None


def item_kinds(catalog: Catalog, allowed: Sequence[str]) -> tuple[str, ...] | None:
    """The kinds of a job's item, in its order of preference: the classes it may run on (all of
    the catalog's, cheapest first, where `allowed` is empty); None where the fleet is not mixed."""
    if not mixed(catalog):
        return None
    if allowed:
        return tuple(allowed)
    return tuple(c.name for c in catalog.cheapest_then_smallest() if c.name is not None)


def cheapest_price(catalog: Catalog, kinds: Sequence[str] | None) -> float:
    """The price a job's fair-share charge is taken at when it is queued: its cheapest class's
    (1.0 outside a mixed fleet); the run's end corrects it to its card's."""
    if not kinds:
        return 1.0
    return min(c.price for c in catalog.classes if c.name in kinds)


def celery_queues(queues: Sequence[str], kind: str | None) -> list[str]:
    """The Celery queues a worker of this kind takes its triggers from: its own kind's queue of
    each fair queue it serves (short, long), the others (the reclaim queue) as they are; the
    queues themselves for a worker without a kind."""
    if kind is None:
        return list(queues)
    return [kind_celery_queue(queue, kind) if queue in KINDS else queue for queue in queues]
