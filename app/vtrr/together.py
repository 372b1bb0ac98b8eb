"""Queues one worker serves together: a trigger of any of them may run an item of another,
chosen by the worker's own policy (see serve_together)."""

from __future__ import annotations

from collections.abc import Sequence

from app.vtrr.celery_queue import Take, Taken, VTRRQueue, delivery_of


def serve_together(queues: Sequence[VTRRQueue], take: Take) -> None:
    """Let a trigger of any of these queues run the item that `take` leases from any of them.

    For a worker that serves several queues and has a policy among them (one before another,
    say): `take(trigger_queue, consumes)` chooses, leases with `take_first` (passing `consumes`
    on) and returns what it took, or None. The function of the item's own queue runs it, and
    the lease is acked, resumed on a retry and reclaimed in that queue. Call it in the
    processes that run the triggers.
    """
    peers = {queue.name: queue for queue in queues}
    for queue in queues:
        queue._take_with, queue._peers = take, peers


def take_first(
    trigger: VTRRQueue, queues: Sequence[VTRRQueue], consumes: bool = True
) -> Taken | None:
    """Lease the fairest item of the first of `queues` with one queued, for a run of a trigger
    of `trigger`; None when all are empty. Only the first lease of a trigger's run consumes it
    (`consumes`); the next ones of its drain lease from every queue without counting a trigger.

    The trigger is counted as run exactly once, in its own queue, whichever queue's item runs:
    each queue's trigger count stays what its broker queue holds (reclaim_and_dispatch relies
    on that), a queue whose trigger ran another queue's item tops its own triggers up, and a
    queue whose item ran on another's trigger keeps a trigger that finds the next item or none.
    """
    if not consumes:
        for queue in queues:
            delivery = delivery_of(queue._take(consumes_trigger=False))
            if delivery is not None:
                return Taken(queue, delivery)
        return None
    counted = False
    for queue in queues:
        if queue is trigger:
            delivery = queue._dequeue()
            counted = True
        else:
            delivery = delivery_of(queue._take(consumes_trigger=False))
        if delivery is not None:
            if not counted:
                trigger.consume_trigger()
            return Taken(queue, delivery)
    if not counted:
        trigger.consume_trigger()
    return None
