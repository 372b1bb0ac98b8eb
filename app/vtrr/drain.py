"""Drain mode: a trigger's run goes on leasing and running items until its queues are empty.

A trigger wakes an idle worker; the woken run then takes item after item, each leased at the
moment the worker frees (so fairness and crash recovery are those of one item per trigger), each
acked as soon as it ends, until nothing is queued, DRAIN_MAX_S has passed, or the worker is
shutting down (a warm shutdown finishes the item in hand and stops). Celery's cost per message
is then paid once per wake-up instead of once per item. The trigger keeps Celery's late ack: it
is acked when its run ends, so no broker message is held for longer than a drain plus one item
(Kombu's visibility timeout must exceed that). While items remain, every lease tops the
triggers up as before, so idle workers are woken and nothing waits on one busy worker.

Celery enforces time limits per message, not per item: a task declared with a soft or hard time
limit (its options or the app's task_time_limit / task_soft_time_limit) runs one item per
trigger, so that each limit still applies to one item. So does the run of a retry, which resumes
the one lease it was given.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from celery import Task
from celery.signals import worker_shutting_down
from celery.worker import state as worker_state

from app.vtrr.held import LEASE_KWARG

if TYPE_CHECKING:
    from app.vtrr.celery_queue import Taken, VTRRQueue

#: How long one trigger's run keeps taking new items (seconds): below Kombu's visibility
#: timeout, less the longest item.
DRAIN_MAX_S = 600.0

# Set in a worker's main process when it begins to shut down. Shared memory created at import,
# before a prefork pool forks its children, which then see the main process's word; a solo or
# threads pool also sees Celery's own flags (worker_state below).
_shutting_down = multiprocessing.RawValue(ctypes.c_bool, False)


@worker_shutting_down.connect
def _note_shutdown(**_: Any) -> None:
    _shutting_down.value = True


def shutting_down() -> bool:
    """Whether this worker is shutting down (warm or cold): a drain stops after its item."""
    return bool(
        _shutting_down.value
        or worker_state.should_stop is not None
        or worker_state.should_terminate is not None
    )


def has_time_limit(task: Task) -> bool:  # type: ignore[type-arg]
    """Whether Celery limits the time of this task's runs (its own options or the app's)."""
    conf = task.app.conf
    limits = (task.time_limit, task.soft_time_limit, conf.task_time_limit)
    return any(limit is not None for limit in (*limits, conf.task_soft_time_limit))


def run_trigger(vtrr: VTRRQueue, task: Task, held: Sequence[str] | None) -> Any:  # type: ignore[type-arg]
    """The body of a run of vtrr's task: a retry's run resumes its one lease (`held`); a
    trigger's run drains, unless it may not. An item that raises ends the run, and the task's
    after_return acks it or keeps its lease, as without drain. Returns the item's result when
    one ran, and {"drained": [item ids], "result": the last result} when several did (Flower
    shows it)."""
    taken = vtrr._resume_held(held) if held else vtrr._next(consumes=True)
    drains = not held and vtrr.drain_max_s > 0 and not has_time_limit(task)
    deadline = time.monotonic() + vtrr.drain_max_s
    ran: list[str] = []
    result = None
    while taken is not None:
        result = _run_item(task, taken)
        ran.append(taken.delivery.task_id)
        if not drains:
            break
        if time.monotonic() >= deadline or shutting_down():
            _ack_item(task, taken)
            break
        taken = _ack_and_next(vtrr, task, taken)
    return result if len(ran) <= 1 else {"drained": ran, "result": result}


def _run_item(task: Task, taken: Taken) -> Any:  # type: ignore[type-arg]
    """Run one leased item under the trigger's run."""
    source, delivery = taken
    # self.request.vtrr_* tell the function which item and lease it runs under, and vtrr_queue
    # the queue that holds the lease. A retry re-sends request.kwargs: this one names the lease
    # and its queue, not the item's data.
    vars(task.request).update(
        vtrr_queue=source.name,
        vtrr_timeouts=delivery.timeouts,
        vtrr_task_id=delivery.task_id,
        vtrr_token=delivery.token,
        kwargs={LEASE_KWARG: [delivery.task_id, delivery.token, source.name]},
    )
    return source._call(task, delivery)


def _ack_and_next(vtrr: VTRRQueue, task: Task, taken: Taken) -> Taken | None:  # type: ignore[type-arg]
    """Ack the item a drain ran and lease the next: in one call (ack_lease.lua) when the next
    comes from the same queue; two when a policy of serve_together chooses among queues."""
    if vtrr._take_with is not None:  # else every item of the drain is vtrr's own
        _ack_item(task, taken)
        return vtrr._next(consumes=False)
    following = vtrr._ack_and_take(taken.delivery.task_id, taken.delivery.token)
    vars(task.request).update(vtrr_task_id=None, kwargs={})
    return following


def _ack_item(task: Task, taken: Taken) -> None:  # type: ignore[type-arg]
    """Ack an item a drain ran, at once; the run then holds no lease (after_return acks none)."""
    taken.queue.ack(taken.delivery.task_id, taken.delivery.token)
    vars(task.request).update(vtrr_task_id=None, kwargs={})
