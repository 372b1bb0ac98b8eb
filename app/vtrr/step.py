"""A worker's step between two items, in one call to Redis (step.lua): end the item it ran
(credit, the hooks' `done`, the ack), then lease the next from the first of its queues with one
queued (the hooks' `lease` on it). A drain (drain.py) is one step per item, over its queue's
group (group.py)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic

from app.vtrr.group import Q, QueueGroup
from app.vtrr.hooks import Arg
from app.vtrr.item import Lease
from app.vtrr.replicated import Replicas
from app.vtrr.wire import CREDIT_MOVES, as_text, credit_of, micros, seconds_of

_HEAD = 9  # the reply's fields before each queue's (triggers to publish, items queued)


@dataclass(frozen=True)
class Ending(Generic[Q]):
    """The item a step ends: its queue and lease, and what its run handed end_with."""

    queue: Q
    task_id: str
    token: str
    args: Sequence[Arg] = ()
    used_weight: int = 0


@dataclass(frozen=True)
class Stepped(Generic[Q]):
    """What a step did: acked (None: it ended nothing), the virtual time credited, `done`'s
    reply, the lease it took and its queue, `lease`'s reply, how many items each queue (by
    name) has queued, and how many replicas acknowledged the step (None: none were asked)."""

    acked: bool | None
    credited: float
    done: Any
    queue: Q | None
    lease: Lease | None
    hooked: Any
    queued: dict[str, int]
    replicated: int | None = None


def step(
    queues: Sequence[Q] | QueueGroup[Q],
    *,
    ending: Ending[Q] | None = None,
    consumes: Q | None = None,
    lease_from: int | None = None,
    replicas: Replicas | None = None,
) -> Stepped[Q]:
    """End `ending` (if any), count one trigger of `consumes` as run (if any), then lease from
    the first of queues[:lease_from] (all when None; 0: lease nothing) with an item queued.
    With replicas = (n, timeout_ms), the step is followed by Redis WAIT on its connection, and
    Stepped.replicated says how many replicas have it.

    Every queue must share the hooks of the first, whose scripts run the call; the queues of
    `ending` and `consumes` are added to the call's queues when missing (leasing from none)."""
    group = queues if isinstance(queues, QueueGroup) else QueueGroup(queues)
    leasing = len(group.queues) if lease_from is None else lease_from
    ended = None if ending is None else ending.queue
    if (ended is not None and ended not in group.queues) or (
        consumes is not None and consumes not in group.queues
    ):
        group = group.with_queues(ended, consumes)
    if not group.shares_hooks:
        raise ValueError("queues stepped together must share their hooks")
    runner = group.first
    token = secrets.token_hex(16)
    args: list[Arg] = [len(group.queues)]
    if ending is None:
        args += [0, "", "", 0, CREDIT_MOVES]
    else:
        index = group.index(ending.queue)
        args += [index, ending.task_id, ending.token, ending.used_weight, CREDIT_MOVES]
    args.append(0 if consumes is None else group.index(consumes))
    args += [leasing, micros(runner.lease_seconds), token, runner.reclaim_limit]
    args += [runner.reclaim_to, *group.trigger_caps()]
    done_args = list(ending.args) if ending else []
    args += [len(done_args), *done_args, *runner.hooks.lease_args()]
    replicated = None
    if replicas is None:
        reply = group.run("step", args)
    else:
        reply, replicated = group.run_replicated("step", args, replicas)

    group.publish(reply, _HEAD, stride=2)
    queued = {q.name: int(reply[_HEAD + 2 * n + 1]) for n, q in enumerate(group.queues)}
    acked = None if int(reply[0]) < 0 else bool(reply[0])
    source, lease = None, None
    if int(reply[3]):
        source = group.queues[int(reply[3]) - 1]
        task_id, payload, timeouts, expiry = (as_text(x) for x in reply[4:8])
        lease = Lease(task_id, token, payload, int(timeouts), seconds_of(expiry))
    return Stepped(
        acked, credit_of(reply[1]), reply[2], source, lease, reply[8], queued, replicated
    )
