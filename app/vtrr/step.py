"""A worker's step between two items, in one call to Redis (step.lua): end the item it ran
(credit, the hooks' `done`, the ack), then lease the next from the first of its queues with one
queued (the hooks' `lease` on it). A drain (drain.py) is one step per item."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.vtrr.hooks import Arg
from app.vtrr.item import Lease
from app.vtrr.queue import FairQueue
from app.vtrr.replicated import Replicas
from app.vtrr.wire import CREDIT_MOVES, as_text, credit_of, micros, seconds_of

_HEAD = 9  # the reply's fields before each queue's (triggers to publish, items queued)


@dataclass(frozen=True)
class Ending:
    """The item a step ends: its queue and lease, and what its run handed end_with."""

    queue: FairQueue
    task_id: str
    token: str
    args: Sequence[Arg] = ()
    used_weight: int = 0


@dataclass(frozen=True)
class Stepped:
    """What a step did: acked (None: it ended nothing), the virtual time credited, `done`'s
    reply, the lease it took and its queue, `lease`'s reply, how many items each queue (by
    name) has queued, and how many replicas acknowledged the step (None: none were asked)."""

    acked: bool | None
    credited: float
    done: Any
    queue: FairQueue | None
    lease: Lease | None
    hooked: Any
    queued: dict[str, int]
    replicated: int | None = None


def step(
    queues: Sequence[FairQueue],
    *,
    ending: Ending | None = None,
    consumes: FairQueue | None = None,
    lease_from: int | None = None,
    replicas: Replicas | None = None,
) -> Stepped:
    """End `ending` (if any), count one trigger of `consumes` as run (if any), then lease from
    the first of queues[:lease_from] (all when None; 0: lease nothing) with an item queued.
    With replicas = (n, timeout_ms), the step is followed by Redis WAIT on its connection, and
    Stepped.replicated says how many replicas have it.

    Every queue must share the hooks of the first, whose scripts run the call; the queues of
    `ending` and `consumes` are added to the call's queues when missing (leasing from none)."""
    order = list(queues)
    leasing = len(order) if lease_from is None else lease_from
    for extra in (ending.queue if ending else None, consumes):
        if extra is not None and extra not in order:
            order.append(extra)
    runner = order[0]
    if any(q.hooks.lua != runner.hooks.lua for q in order):
        raise ValueError("queues stepped together must share their hooks")
    keys = [k for q in order for k in q._scripts.all_keys()]
    token = secrets.token_hex(16)
    args: list[Arg] = [len(order)]
    if ending is None:
        args += [0, "", "", 0, CREDIT_MOVES]
    else:
        index = order.index(ending.queue) + 1
        args += [index, ending.task_id, ending.token, ending.used_weight, CREDIT_MOVES]
    args.append(0 if consumes is None else order.index(consumes) + 1)
    args += [leasing, micros(runner.lease_seconds), token, runner._reclaim_limit]
    args += [runner._reclaim_to, *(q._trigger_cap for q in order)]
    done_args = list(ending.args) if ending else []
    args += [len(done_args), *done_args, *runner.hooks.lease_args()]
    replicated = None
    if replicas is None:
        reply = runner._scripts.run_over("step", keys, *args)
    else:
        reply, replicated = runner._scripts.run_replicated("step", keys, args, replicas)

    queued: dict[str, int] = {}
    for n, queue in enumerate(order):
        queue._publish(int(reply[_HEAD + 2 * n]))
        queued[queue.name] = int(reply[_HEAD + 2 * n + 1])
    acked = None if int(reply[0]) < 0 else bool(reply[0])
    source, lease = None, None
    if int(reply[3]):
        source = order[int(reply[3]) - 1]
        task_id, payload, timeouts, expiry = (as_text(x) for x in reply[4:8])
        lease = Lease(task_id, token, payload, int(timeouts), seconds_of(expiry))
    stepped = (acked, credit_of(reply[1]), reply[2], source, lease, reply[8], queued)
    return Stepped(*stepped, replicated)
