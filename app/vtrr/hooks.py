"""Hooks: an application's Lua, run inside the fair queue's own calls: its step between two
items, and an enqueue given hook arguments.

A worker that runs item after item (a drain, app/vtrr/drain.py) goes from one to the next in
one call to Redis (step.lua): it credits the item it ran with what it did not use, acks it and
leases the next. An application that keeps records of its own beside the queue (a job's status,
its bill) would pay a round trip per change of them; hooks put those changes in the same call,
and so in the same atomic step:

    done(id, token, args, step)   before the ack of the item the worker ran; `args` are what its
                                  function handed to `end_with`, `step.held` says whether its
                                  lease was still current, `step.credited` what was credited
    lease(id, token, args)        once the next item is leased; `args` are `lease_args()`

A lease that lapses is the application's news too: its run was lost (a worker killed, frozen or
cut off), and the item is queued again by whichever call reclaims it (a periodic reclaim, a
dequeue, a step). In that same call:

    reclaimed(id, token)          once the item is back in line; `token` is the lease that
                                  lapsed (the application's record of the run can say so)

The producer's side has two more, run by AsyncFairQueue.admit_and_enqueue with the arguments it
is given (a plain enqueue runs neither), so that a record and its item are written together:

    admit(partition, args)        before anything else: a value other than nil stops the call
                                  and nothing of the queue is written (a refusal, a replay)
    enqueued(partition, args)     once the queue's own checks (FULL, DUPLICATE) have passed,
                                  before its writes: the application writes its record here

Either may return redis.error_reply(...) to fail the call.

`lua` is a chunk that returns a table of those functions (any may be missing); it runs once
when the library loads (Redis 7) or at each call of an operation that calls hooks (6.2), in a
scope of its own, with the `redis` and `cjson` of any script. A hook reaches keys of its own by
name (Redis Cluster is not supported: Kombu has no transport for it), and what it returns comes
back to Python: `lease`'s as `held_lease(task).hooked` in the item's run, `done`'s in the step's
reply, `admit`'s or `enqueued`'s as `Admitted.reply`.

This module names what the library offers; the hooks themselves are the application's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from app.vtrr.lua_text import NO_HOOKS

if TYPE_CHECKING:
    from celery import Task

Arg = str | int


class Hooks(Protocol):
    """What a queue is given as `hooks=`: its Lua chunk and the arguments of each `lease`."""

    @property
    def lua(self) -> str:
        """A Lua chunk that returns {lease = function(id, token, args), done = function(id,
        token, args, step), reclaimed = function(id, token), admit = function(partition,
        args), enqueued = function(partition, args)}, any of them missing."""
        ...

    def lease_args(self) -> Sequence[Arg]:
        """The arguments `lease` gets at each lease (the worker's own, say)."""
        ...


class NoHooks:
    """The hooks of a queue given none: nothing runs but the queue's own step."""

    lua = NO_HOOKS

    def lease_args(self) -> Sequence[Arg]:
        return ()


#: Told what the hooks' `done` returned, once the step that ran it is over.
Then = Callable[[Any], None]


def end_with(
    task: Task,  # type: ignore[type-arg]
    *args: Arg,
    used_weight: int = 0,
    then: Then | None = None,
) -> None:
    """Say, from a @vtrr.task function, how its item ended: `args` go to the hooks' `done` in
    the step that acks the item, `used_weight` (when positive and below the item's weight)
    credits its partition with the rest, as FairQueue.credit does, and `then` hears what `done`
    returned (the step runs after the function has returned)."""
    vars(task.request)["vtrr_end"] = Ended(list(args), used_weight, then)


@dataclass(frozen=True)
class Ended:
    """What an item's run handed end_with."""

    args: list[Arg]
    used_weight: int = 0
    then: Then | None = None


def ending(task: Task) -> Ended:  # type: ignore[type-arg]
    """What the item's run handed end_with (nothing, and no credit, when it did not call it);
    taken off the request, so that the next item of a drain starts with none."""
    found: Ended | None = vars(task.request).pop("vtrr_end", None)
    return found if found is not None else Ended([])
