"""The lease a run of a @vtrr.task holds, as a typed value instead of request attributes."""

from __future__ import annotations

from typing import Any, NamedTuple

from celery import Task

#: The keyword a retry message carries so that the retry run resumes its own lease.
LEASE_KWARG = "_vtrr_lease"


class HeldLease(NamedTuple):
    """The lease the current run of a @vtrr.task holds; `hooked` is what its queue's hooks'
    `lease` returned for it (None without hooks, or in a retry's run: see app/vtrr/hooks.py);
    `leased_at` the time.monotonic() at which the call that leased it was sent (None where not
    known: a retry's run), before which plus the lease's length it cannot expire."""

    task_id: str
    token: str
    timeouts: int
    hooked: Any = None
    leased_at: float | None = None


def held_lease(task: Task) -> HeldLease | None:  # type: ignore[type-arg]
    """The lease of the run in progress of a @vtrr.task (also `self.request.vtrr_task_id`,
    `vtrr_token`, `vtrr_timeouts` and `vtrr_hooked`); None outside such a run."""
    request = task.request
    task_id = getattr(request, "vtrr_task_id", None)
    if task_id is None:
        return None
    held = vars(request)  # set by the task's run (see _celery_task)
    return HeldLease(
        task_id,
        held["vtrr_token"],
        held["vtrr_timeouts"],
        held.get("vtrr_hooked"),
        held.get("vtrr_leased_at"),
    )
