"""A group of queues served together: one call to Redis over all of them (a worker's step,
step.lua; a wake, wake.lua) passes every queue's keys and trigger cap, and publishes the
triggers it made due in each; a worker that serves several has a policy that orders them.

The group is where those parts of its queues meet, so that no caller reaches into a queue for
them: a VTRRQueue's `group` (itself alone, or the queues `serve_together` joined, with their
policy) is what its triggers' runs step over and where a lease's queue is found by name; the
queues of a limits group are woken as one (`wake_together`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from app.vtrr.hooks import Hooks
from app.vtrr.layout import Placement
from app.vtrr.limits import WAKE_BATCH, Woken
from app.vtrr.replicated import Replicas
from app.vtrr.scripts import Scripts
from app.vtrr.wire import as_text

#: How many of a policy's orders a group keeps as groups (fairgpu's has two).
ORDERS_KEPT = 4


class Member(Protocol):
    """What a group needs of each of its queues (a FairQueue has all of it): its name, hooks
    and lease length, how it reclaims and how many triggers it keeps, the way into its Lua, and
    how it sends the triggers a call made due."""

    @property
    def name(self) -> str: ...

    @property
    def hooks(self) -> Hooks: ...

    @property
    def lease_seconds(self) -> float: ...

    @property
    def trigger_cap(self) -> int: ...

    @property
    def reclaim_limit(self) -> int: ...

    @property
    def reclaim_to(self) -> Placement: ...

    @property
    def scripts(self) -> Scripts: ...

    def publish_triggers(self, count: int) -> None: ...


Q = TypeVar("Q", bound=Member)


class Choice(Protocol[Q]):
    """A worker's policy among the queues it serves together (VTRRQueue's `Policy`)."""

    def order(self, trigger: Q) -> Sequence[Q]: ...

    def took(self, queue: Q | None, queued: Mapping[str, int]) -> None: ...


class QueueGroup(Generic[Q]):
    """Queues served together, in order (the first's scripts run a call over them all), and
    the policy among them (None: a trigger's run leases from its own queue only)."""

    __slots__ = ("_orders", "policy", "queues", "shares_hooks")

    def __init__(self, queues: Iterable[Q], policy: Choice[Q] | None = None) -> None:
        self.queues: list[Q] = list(queues)
        if not self.queues:
            raise ValueError("a queue group needs at least one queue")
        self.policy = policy
        lua = self.queues[0].hooks.lua
        #: Whether the queues may step together: the first's Lua runs every hook of the call.
        self.shares_hooks = all(q.hooks.lua == lua for q in self.queues)
        self._orders: list[QueueGroup[Q]] = []  # the policy's latest orders, as groups

    @property
    def first(self) -> Q:
        """The queue whose scripts, lease length and reclaim settings run a call over all."""
        return self.queues[0]

    def get(self, name: str) -> Q | None:
        """The queue of that name in the group (a lease's queue, by the name its run carries),
        or None."""
        for queue in self.queues:
            if queue.name == name:
                return queue
        return None

    def index(self, queue: Q) -> int:
        """The queue's 1-based place in the group (the scripts' numbering)."""
        return self.queues.index(queue) + 1

    def order(self, trigger: Q) -> QueueGroup[Q]:
        """The queues a run of a trigger of `trigger` leases from, preferred first: its own
        alone (the group itself, when that is all it holds), or the policy's order."""
        if self.policy is None:
            alone = len(self.queues) == 1 and self.queues[0] is trigger
            return self if alone else QueueGroup([trigger])
        chosen = self.policy.order(trigger)
        queues = chosen if isinstance(chosen, list) else list(chosen)
        for known in self._orders:  # a policy has few orders: each step reuses its group
            if known.queues == queues:
                return known
        ordered = QueueGroup(queues)
        self._orders = [ordered, *self._orders[: ORDERS_KEPT - 1]]
        return ordered

    def with_queues(self, *extra: Q | None) -> QueueGroup[Q]:
        """This group, or a copy with the queues of `extra` it lacks added last."""
        for queue in extra:
            if queue is not None and queue not in self.queues:
                break
        else:
            return self  # the usual case: nothing to copy
        queues = list(self.queues)
        for queue in extra:
            if queue is not None and queue not in queues:
                queues.append(queue)
        return QueueGroup(queues, self.policy)

    def took(self, queue: Q | None, queued: Mapping[str, int]) -> Q | None:
        """Tell the policy where a lease came from (None: every queue was empty) and how many
        items each queue still has; returns the group's queue of that name (None: not one)."""
        source = None if queue is None else self.get(queue.name)
        if self.policy is not None:
            self.policy.took(source, queued)
        return source

    # -- one call over the group ----------------------------------------------------------------
    def keys(self) -> list[str]:
        """Every queue's keys, in order: the KEYS of a call over the group."""
        return [k for q in self.queues for k in q.scripts.all_keys()]

    def trigger_caps(self) -> list[int]:
        """Every queue's trigger cap, in order (-1: it publishes none)."""
        return [q.trigger_cap for q in self.queues]

    def run(self, name: str, args: Sequence[str | int | float]) -> Any:
        """Run one operation over the group's keys, with the first queue's scripts."""
        return self.first.scripts.run_over(name, self.keys(), *args)

    def run_replicated(
        self, name: str, args: Sequence[str | int | float], replicas: Replicas
    ) -> tuple[Any, int]:
        """run(), followed by WAIT for replicas: the reply and how many replicas have it."""
        return self.first.scripts.run_replicated(name, self.keys(), args, replicas)

    def publish(self, reply: Sequence[Any], start: int, stride: int = 1) -> None:
        """Send each queue the triggers a call over the group made due: the i-th queue's
        count is reply[start + i * stride]."""
        for i, queue in enumerate(self.queues):
            queue.publish_triggers(int(reply[start + i * stride]))

    def wake(self) -> Woken:
        """Let limited partitions start their next item where they now may, over the group's
        queues (one limits group: wake.lua), in calls of WAKE_BATCH partitions; publishes the
        triggers that makes due. Says how many it woke and when the next wait for time ends."""
        caps = self.trigger_caps()
        woken = 0
        while True:
            reply = self.run("wake", [len(self.queues), WAKE_BATCH, *caps])
            self.publish(reply, 4)
            woken += int(reply[0])
            if not int(reply[1]):
                us, now = float(as_text(reply[2])), float(as_text(reply[3])) / 1_000_000
                return Woken(woken, None if us < 0 else us / 1_000_000, now)


def wake_together(queues: Iterable[Member]) -> Woken:
    """Wake the queues of one limits group as one (QueueGroup.wake)."""
    return QueueGroup(queues).wake()
