"""Queues one worker serves together: a trigger of any of them may run an item of another,
chosen by the worker's own policy (see serve_together)."""

from __future__ import annotations

from collections.abc import Sequence

from app.vtrr.celery_queue import Policy, VTRRQueue
from app.vtrr.group import QueueGroup


def serve_together(queues: Sequence[VTRRQueue], policy: Policy) -> QueueGroup[VTRRQueue]:
    """Let a trigger of any of these queues run the item that `policy` picks among them: the
    queues' group (group.py) becomes each one's `group`, and is returned.

    For a worker that serves several queues and has a policy among them (one before another,
    say): before each lease, `policy.order(trigger_queue)` lists the queues to try, preferred
    first, and the step (step.py) leases the fairest item of the first one with any queued, in
    the same call that ended the previous item; `policy.took(queue, queued)` then hears what it
    found. The function of the item's own queue runs it, and the lease is acked, resumed on a
    retry and reclaimed in that queue. The queues must share their hooks. Call it in the
    processes that run the triggers.

    The trigger is counted as run exactly once, in its own queue, whichever queue's item runs:
    each queue's trigger count stays what its broker queue holds (reclaim_and_dispatch relies
    on that), a queue whose trigger ran another queue's item tops its own triggers up, and a
    queue whose item ran on another's trigger keeps a trigger that finds the next item or none.
    """
    group = QueueGroup(queues, policy)
    for queue in queues:
        queue.group = group
    return group
