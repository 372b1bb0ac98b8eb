"""What a trigger's run is handed: the item to run, the lease it holds, and its queue."""

from __future__ import annotations

import json
from typing import Any, NamedTuple, Protocol, Self

from celery import Task

from app.vtrr.group import Member, QueueGroup
from app.vtrr.item import Lease
from app.vtrr.slots import Held


class Delivery(NamedTuple):
    """What a lease hands a worker: the item to run and the lease it holds. `_dequeue()`
    returns it, and callers unpack its six fields as the vtrr-queue reference documents, so it
    gains no field (what hooks return travels in Taken)."""

    task_name: str
    args: list[Any]
    kwargs: dict[str, Any]
    task_id: str
    token: str
    timeouts: int


class Served(Member, Protocol):
    """A queue whose triggers' runs lease from its group and run its items (a VTRRQueue):
    what a run (drain.py) needs of it."""

    @property
    def group(self) -> QueueGroup[Self]: ...

    @property
    def replicas(self) -> int: ...

    @property
    def drain_max_s(self) -> float: ...

    def resume(self, task_id: str, token: str) -> Lease | None: ...

    def run_item(self, task: Task, delivery: Delivery) -> Any: ...  # type: ignore[type-arg]

    def card_held(self) -> Held | None: ...


class Taken(NamedTuple):
    """An item a trigger's run leased, the queue it came from (see serve_together), what that
    queue's hooks' `lease` returned for it (None without hooks, or in a retry's run: see
    hooks.py), and the time.monotonic() at which the call that leased it was sent (None: not
    known): its lease cannot expire before that time plus the lease's length."""

    queue: Served
    delivery: Delivery
    hooked: Any = None
    leased_at: float | None = None


def delivery_of(lease: Lease | None) -> Delivery | None:
    """The item a lease holds, as a worker runs it."""
    if lease is None:
        return None
    body = json.loads(lease.payload)
    return Delivery(
        body["task"],
        body["args"],
        body["kwargs"],
        lease.task_id,
        lease.token,
        lease.timeouts,
    )
