"""What @VTRRQueue.task makes (VTRRTask: the task and its queue() of items), the options it
passes on to Celery, and the Celery queue of a kind's triggers: the pieces of celery_queue.py
that need nothing of the queue but its enqueue."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from celery import Task

from app.vtrr.held import LEASE_KWARG
from app.vtrr.item import Item, Lease
from app.vtrr.pool import check_kind


class Enqueues(Protocol):
    """What a VTRRTask's queue() needs of its queue (a VTRRQueue)."""

    name: str

    def enqueue(self, partition_key: str, items: Sequence[Item]) -> list[str]: ...


def kind_celery_queue(celery_queue: str, kind: str) -> str:
    """The Celery queue of the triggers for the consumers of one kind (pool.py)."""
    return f"{celery_queue}.{check_kind(kind)}"


#: The Celery options that @vtrr.task passes on; `bind` is accepted and ignored (always bound).
TASK_OPTIONS = frozenset(
    {
        "base",
        "max_retries",
        "default_retry_delay",
        "autoretry_for",
        "retry_backoff",
        "retry_backoff_max",
        "retry_jitter",
        "retry_kwargs",
        "soft_time_limit",
        "time_limit",
        "acks_late",
        "reject_on_worker_lost",
    }
)
ITEM_FIELDS = frozenset({"id", "weight", "args", "kwargs"})


class VTRRTask:
    """What @vtrr.task returns: `queue()` puts work in line; `celery_task` is what workers run."""

    def __init__(self, vtrr: Enqueues, celery_task: Task) -> None:  # type: ignore[type-arg]
        self.vtrr = vtrr
        self.celery_task = celery_task
        self.name: str = celery_task.name

    def queue(self, partition_key: str, tasks: Sequence[Mapping[str, Any]]) -> list[str]:
        """Enqueue tasks of one partition in one Redis round trip; returns their task ids.

        Each task is a dict with optional "id", "weight" (positive int, default 1), "args" and
        "kwargs"; anything else is a TypeError, and nothing is queued.
        """
        items = [self.item(spec) for spec in tasks]
        return self.vtrr.enqueue(partition_key, items)

    def run_held(self, lease: Lease, **options: Any) -> None:
        """Send a run of the task that resumes `lease`, held by this queue's consumer already
        (one it claimed by tick(): slots.py), with Celery's apply_async options: e.g. its
        worker's own queue (celery.utils.worker_direct), so that this worker runs it."""
        held = {LEASE_KWARG: [lease.task_id, lease.token, self.vtrr.name]}
        self.celery_task.apply_async(kwargs=held, **options)

    def item(self, spec: Mapping[str, Any]) -> Item:
        """The queue item for one task dict (what queue() writes), e.g. for an AsyncFairQueue."""
        unknown = set(spec) - ITEM_FIELDS
        if unknown:
            raise TypeError(
                f"unknown task fields {sorted(unknown)}; allowed: {sorted(ITEM_FIELDS)}"
            )
        args, kwargs = spec.get("args", []), spec.get("kwargs", {})
        if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
            raise TypeError("a task's args must be a list and its kwargs a dict")
        payload = json.dumps({"task": self.name, "args": list(args), "kwargs": kwargs})
        return Item(payload=payload, id=spec.get("id"), weight=spec.get("weight", 1))
