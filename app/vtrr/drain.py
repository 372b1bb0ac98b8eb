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
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from celery import Task
from celery.signals import worker_shutting_down
from celery.worker import state as worker_state
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from tenacity import Retrying, retry_if_exception_type, stop_before_delay, wait_exponential

from app.vtrr.delivery import Served, Taken, delivery_of
from app.vtrr.held import LEASE_KWARG
from app.vtrr.hooks import ending
from app.vtrr.replicated import REPLICA_PATIENCE_S, REPLICA_WAIT_MS, until_replicated
from app.vtrr.step import Ending, Stepped, step

#: How long one trigger's run keeps taking new items (seconds): below Kombu's visibility
#: timeout, less the longest item.
DRAIN_MAX_S = 600.0
#: How long a trigger's run on a lent card waits for the lend to end before it returns (s).
LENT_HOLD_S = 30.0
#: How often that wait looks at the card (seconds).
LENT_POLL_S = 0.2
#: How long the step that ends an item keeps trying while Redis is unreachable (seconds).
STEP_PATIENCE_S = 30.0
UNREACHABLE = (RedisConnectionError, RedisTimeoutError)

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


def run_trigger(vtrr: Served, task: Task, held: Sequence[str] | None) -> Any:  # type: ignore[type-arg]
    """The body of a run of vtrr's task: a retry's run resumes its one lease (`held`); a
    trigger's run leases and drains, unless it may not. Each item that returns is ended by a
    step (step.py) that also leases the next, when the run goes on; an item that raises ends
    the run, and the task's after_return acks it or keeps its lease, as without drain. Returns
    the item's result when one ran, and {"drained": [item ids], "result": the last result}
    when several did (Flower shows it)."""
    sent = time.monotonic()
    if held:
        taken = _resumed(vtrr, held)
    else:
        taken = _leased(vtrr, step(vtrr.group.order(vtrr), consumes=vtrr), sent)
    if taken is None and not held:
        _wait_while_lent(vtrr)
    drains = not held and vtrr.drain_max_s > 0 and not has_time_limit(task)
    deadline = time.monotonic() + vtrr.drain_max_s
    ran: list[str] = []
    result = None
    while taken is not None:
        result = _run_item(task, taken)
        ran.append(taken.delivery.task_id)
        more = drains and time.monotonic() < deadline and not shutting_down()
        taken = _end(vtrr, task, taken, more)
    return result if len(ran) <= 1 else {"drained": ran, "result": result}


def _wait_while_lent(vtrr: Served) -> None:
    """A trigger that reached a consumer whose card is lent to an item of several cards (its
    step leased nothing, and put the trigger back for another consumer): the run holds this
    worker, so that the broker hands its next trigger to another, until the lend ends or
    LENT_HOLD_S has passed (below Kombu's visibility timeout)."""
    deadline = time.monotonic() + LENT_HOLD_S
    held = vtrr.card_held()
    while held is not None and held.role == "lent" and time.monotonic() < deadline:
        time.sleep(LENT_POLL_S)  # the lend ends with another worker's run: nothing to wait on
        held = vtrr.card_held()


def _run_item(task: Task, taken: Taken) -> Any:  # type: ignore[type-arg]
    """Run one leased item under the trigger's run."""
    source, delivery, hooked, leased_at = taken
    # self.request.vtrr_* tell the function which item and lease it runs under, and vtrr_queue
    # the queue that holds the lease. A retry re-sends request.kwargs: this one names the lease
    # and its queue, not the item's data.
    vars(task.request).update(
        vtrr_queue=source.name,
        vtrr_timeouts=delivery.timeouts,
        vtrr_task_id=delivery.task_id,
        vtrr_token=delivery.token,
        vtrr_hooked=hooked,
        vtrr_leased_at=leased_at,
        kwargs={LEASE_KWARG: [delivery.task_id, delivery.token, source.name]},
    )
    return source.run_item(task, delivery)


def _end(vtrr: Served, task: Task, taken: Taken, more: bool) -> Taken | None:  # type: ignore[type-arg]
    """End the item that returned, in one step with the lease of the next when the run goes on
    (`more`). While Redis is unreachable the step is tried again for STEP_PATIENCE_S, as the
    item's end may hold what its run recorded; then the error goes up and after_return keeps
    the lease. The run holds no lease afterwards (after_return acks none)."""
    end = ending(task)
    queue, delivery = taken.queue, taken.delivery
    ended = Ending(queue, delivery.task_id, delivery.token, end.args, end.used_weight)
    sent = time.monotonic()
    if vtrr.replicas:
        stepped = _replicated_end(vtrr, ended)
    else:
        stepped = _patiently(
            partial(step, vtrr.group.order(vtrr), ending=ended, lease_from=None if more else 0)
        )
    vars(task.request).update(vtrr_task_id=None, vtrr_hooked=None, vtrr_leased_at=None, kwargs={})
    if end.then is not None:
        end.then(stepped.done)
    if more and vtrr.replicas:  # the end is on the replicas: now the next
        sent = time.monotonic()
        stepped = _patiently(partial(step, vtrr.group.order(vtrr)))
    return _leased(vtrr, stepped, sent) if more else None


def _resumed(vtrr: Served, held: Sequence[str]) -> Taken | None:
    """A retry's run: renew the lease it started under, on the queue it came from (this one,
    or one of its group), or None if it was reclaimed since."""
    source = (vtrr.group.get(held[2]) or vtrr) if len(held) > 2 else vtrr
    delivery = delivery_of(source.resume(held[0], held[1]))
    return None if delivery is None else Taken(source, delivery)


def _patiently(call: Callable[[], Stepped[Served]]) -> Stepped[Served]:
    """A step, tried again for STEP_PATIENCE_S while Redis is unreachable."""
    try:
        return call()
    except UNREACHABLE:
        patiently = Retrying(
            retry=retry_if_exception_type(UNREACHABLE),
            wait=wait_exponential(multiplier=0.1, max=2.0),
            stop=stop_before_delay(STEP_PATIENCE_S),
            reraise=True,
        )
        return patiently(call)


def _replicated_end(vtrr: Served, ended: Ending[Served]) -> Stepped[Served]:
    """The step that ends an item and leases nothing, followed by WAIT until vtrr.replicas
    replicas have it, so that a failover cannot take back an end the worker went on from (and
    `then`, which may tell the world, hears it only then). A short count repeats the step (the
    item is ended once: a repeat on the same primary ends nothing, and one on a new primary
    that lost the end records it there), for REPLICA_PATIENCE_S; then NotReplicatedError
    goes up and the end is not reported. The first step's reply stands."""
    replicas = (vtrr.replicas, REPLICA_WAIT_MS)

    def ended_once() -> tuple[Stepped[Served], int]:
        stepped = _patiently(
            partial(step, vtrr.group.order(vtrr), ending=ended, lease_from=0, replicas=replicas)
        )
        return stepped, stepped.replicated or 0

    stepped: Stepped[Served] = until_replicated(ended_once, vtrr.replicas, REPLICA_PATIENCE_S)
    return stepped


def _leased(vtrr: Served, stepped: Stepped[Served], sent: float) -> Taken | None:
    """The item a step sent at `sent` leased; serve_together's policy hears where it came
    from."""
    source = vtrr.group.took(stepped.queue, stepped.queued)
    delivery = delivery_of(stepped.lease)
    if source is None or delivery is None:
        return None
    return Taken(source, delivery, stepped.hooked, sent)
