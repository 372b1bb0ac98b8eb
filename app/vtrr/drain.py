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
from typing import Any

from celery import Task
from celery.signals import worker_shutting_down
from celery.worker import state as worker_state

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
