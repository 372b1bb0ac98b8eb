"""A pure-Python model of FairQueue (app/vtrr): what each operation answers and leaves behind.

The model keeps the same virtual clock as the Lua scripts (see app/vtrr/lua/lib/), in
Python floats with the same order of operations, so scores, members and partition virtual times
can be compared exactly. Time does not pass in the model: a lease expires only when told to
(`extend(..., expire=True)`), and expired leases go back to the queue, oldest expiry first, at
the next reclaim. The cap on idle partitions (IDLE_SLACK in lib/partitions.lua) is not modelled: it
needs far more partitions than the model is driven with, and neither is the bound on the items
one credit moves (CREDIT_MOVES) or items queued before the index of a partition's items: the
model never has that many queued, and it has no such items.

Per-partition limits are modelled with a weight that is never used up (weight_per_second 0):
a limited partition may have at most `most_in_flight` items leased, and the weights of those
plus its next one's at most `most_held` (unless it has none leased). Only each limited
partition's next item, while its limits let it start, is among the items that may start: a
dequeue takes the first (or last) of those, and the front is the lowest of their scores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

FRONT_BASE = 999_999_999_999_999
STAT_NAMES = (
    "enqueued",
    "dequeued",
    "acked",
    "reclaimed",
    "cancelled",
    "released",
    "promoted",
    "credited",
)


@dataclass
class Entry:
    """An item the queue knows (queued or leased), from enqueue until ack or cancel."""

    partition: str
    cost: float
    weight: int
    payload: str
    score: float = 0.0
    member: str = ""  # its queue member while queued, else ""
    token: str | None = None  # its lease token while leased, else None
    timeouts: int = 0
    credited: bool = False  # credited since it was last charged (a fair placement)


@dataclass(frozen=True)
class Taken:
    """What a dequeue or resume hands out, less the token and expiry the real queue makes up."""

    task_id: str
    payload: str
    timeouts: int


class QueueModel:
    """The fair queue's expected behaviour: fair and front placement, leases, reclaim, refunds."""

    def __init__(
        self,
        *,
        shares: Mapping[str, float] | None = None,
        reclaim_to: str = "fair",
        reclaim_on_dequeue: bool = True,
    ) -> None:
        self.shares: dict[str, float] = dict(shares or {})
        self.reclaim_to = reclaim_to  # "fair", "front" or "partition_front"
        self.reclaim_on_dequeue = reclaim_on_dequeue
        self.cvt = 0.0
        self.pvt: dict[str, float] = {}
        self.seq = 0
        self.entries: dict[str, Entry] = {}
        self.expired: list[str] = []  # leased ids whose lease has expired, oldest expiry first
        self.stats: dict[str, int] = dict.fromkeys(STAT_NAMES, 0)
        #: partition -> (most in flight, most weight held), None for no such limit
        self.limits: dict[str, tuple[int | None, int | None]] = {}

    # -- inspection -------------------------------------------------------------------------------
    def cost(self, partition: str, weight: int) -> float:
        """An item's cost: its weight over its partition's share (1 unless configured)."""
        return weight / float(self.shares.get(partition, 1.0))

    def queue(self) -> list[tuple[str, float]]:
        """Queued (member, score) pairs in dispatch order: by score, then by member."""
        queued = [(e.score, e.member) for e in self.entries.values() if e.member]
        return [(member, score) for score, member in sorted(queued)]

    def may_start(self) -> list[tuple[str, float]]:
        """The queued (member, score) pairs that may start now, in dispatch order: every item
        of a partition without limits, and each limited partition's next one while its limits
        let it start."""
        nexts: dict[str, Entry] = {}
        for e in sorted(
            (e for e in self.entries.values() if e.member), key=lambda e: (e.score, e.member)
        ):
            nexts.setdefault(e.partition, e)
        ready = [
            (e.score, e.member)
            for e in self.entries.values()
            if e.member
            and (e.partition not in self.limits or (nexts[e.partition] is e and self._room(e)))
        ]
        return [(member, score) for score, member in sorted(ready)]

    def _room(self, entry: Entry) -> bool:
        """Whether entry's limited partition may start it now."""
        most_n, most_held = self.limits[entry.partition]
        flying = [e for e in self.entries.values() if e.partition == entry.partition and e.token]
        if most_n is not None and len(flying) >= most_n:
            return False
        if most_held is None or not flying:
            return True
        return sum(e.weight for e in flying) + entry.weight <= most_held

    def over_limit(self, partition: str, weights: Sequence[int]) -> int | None:
        """The partition's most weight held, when an item of weights passes it (else None)."""
        held = self.limits.get(partition, (None, None))[1]
        return held if held is not None and any(w > held for w in weights) else None

    def set_limits(self, partition: str, most_n: int | None, most_held: int | None) -> None:
        """Set or (both None) clear a partition's limits."""
        if most_n is None and most_held is None:
            self.limits.pop(partition, None)
        else:
            self.limits[partition] = (most_n, most_held)

    def order(self) -> list[str]:
        """Queued task ids in dispatch order."""
        return [member[17:] for member, _ in self.queue()]

    def length(self) -> int:
        """How many items are queued."""
        return sum(1 for e in self.entries.values() if e.member)

    def pending(self) -> int:
        """How many items are leased (expired leases count until they are reclaimed)."""
        return sum(1 for e in self.entries.values() if e.token is not None)

    def queued_in(self, partition: str) -> int:
        """How many items of a partition are queued."""
        return sum(1 for e in self.entries.values() if e.member and e.partition == partition)

    def idle_partitions(self) -> dict[str, float]:
        """Partitions with a virtual time and nothing queued, with that virtual time."""
        return {p: vt for p, vt in self.pvt.items() if not self.queued_in(p)}

    def position(self, task_id: str) -> int | None:
        """An item's 0-based place in dispatch order, or None when it is not queued."""
        order = self.order()
        return order.index(task_id) if task_id in order else None

    def first_duplicate(self, ids: Sequence[str | None]) -> str | None:
        """The first id of a batch that is already known or repeats an earlier one (None: none)."""
        seen: set[str] = set()
        for task_id in ids:
            if task_id is None:
                continue
            if task_id in seen or task_id in self.entries:
                return task_id
            seen.add(task_id)
        return None

    # -- placement --------------------------------------------------------------------------------
    def _front_score(self) -> float:
        queue = self.may_start()
        return queue[0][1] if queue else self.cvt

    def _place(self, task_id: str, front: bool) -> None:
        entry = self.entries[task_id]
        self.seq += 1
        if front:
            entry.score = self._front_score()
            entry.member = f"0{FRONT_BASE - self.seq:015d}:{task_id}"
        else:
            entry.score = max(self.cvt, self.pvt.get(entry.partition, 0.0))
            self.pvt[entry.partition] = entry.score + entry.cost
            entry.member = f"1{self.seq:015d}:{task_id}"
            entry.credited = False

    def _unqueued(self, partition: str) -> None:
        """One item of partition left the queue; if it was its last, forget passed idle ones.

        Idle partitions are pruned only here, when one goes idle: one whose virtual time the
        queue's clock passes later stays remembered (harmlessly) until the next time this runs.
        """
        if self.queued_in(partition):
            return
        for idle, vt in self.idle_partitions().items():
            if vt <= self.cvt:
                del self.pvt[idle]

    def _reset_if_drained(self) -> None:
        if not self.length():
            self.cvt = 0.0
            self.pvt.clear()

    def _unlease(self, task_id: str) -> Entry:
        entry = self.entries[task_id]
        entry.token = None
        if task_id in self.expired:
            self.expired.remove(task_id)
        return entry

    def holds_lease(self, task_id: str, token: str) -> bool:
        """Whether token is the item's current lease (an expired one counts until reclaimed)."""
        entry = self.entries.get(task_id)
        return entry is not None and entry.token == token

    # -- operations -------------------------------------------------------------------------------
    def enqueue(self, partition: str, items: Sequence[tuple[str, int, str]], front: bool) -> None:
        """Queue a batch of (task id, weight, payload) of one partition; ids must be new."""
        assert self.first_duplicate([task_id for task_id, _, _ in items]) is None
        for task_id, weight, payload in items:
            cost = self.cost(partition, weight)
            self.entries[task_id] = Entry(partition, cost, weight, payload)
            self._place(task_id, front)
        self.stats["enqueued"] += len(items)

    def dequeue(self, token: str, *, from_rear: bool = False) -> Taken | None:
        """Reclaim (if configured), then lease the first (or last) queued item under token."""
        if self.reclaim_on_dequeue:
            self.reclaim()
        queue = self.may_start()
        if not queue:
            return None
        member, score = queue[-1] if from_rear else queue[0]
        entry = self.entries[member[17:]]
        if not from_rear:
            # a limited partition's item may have waited below the clock: it never goes back
            self.cvt = max(self.cvt, score) if entry.partition in self.limits else score
        entry.member, entry.token = "", token
        self._unqueued(entry.partition)
        self.stats["dequeued"] += 1
        self._reset_if_drained()
        return Taken(member[17:], entry.payload, entry.timeouts)

    def ack(self, task_id: str, token: str) -> bool:
        """Finish a leased item, for the holder of its current lease only."""
        if not self.holds_lease(task_id, token):
            return False
        self._unlease(task_id)
        del self.entries[task_id]
        self.stats["acked"] += 1
        return True

    def extend(self, task_id: str, token: str, *, expire: bool) -> bool:
        """Renew a current lease: to expire at once (expire) or far in the future."""
        if not self.holds_lease(task_id, token):
            return False
        if task_id in self.expired:
            self.expired.remove(task_id)
        if expire:
            self.expired.append(task_id)
        return True

    def resume(self, task_id: str, token: str) -> Taken | None:
        """Renew a current lease in full and hand its item back; None when the lease is stale."""
        if not self.extend(task_id, token, expire=False):
            return None
        entry = self.entries[task_id]
        return Taken(task_id, entry.payload, entry.timeouts)

    def release(self, task_id: str, token: str) -> bool:
        """Give a leased item back to the front, for the holder of its current lease only."""
        if not self.holds_lease(task_id, token):
            return False
        self._unlease(task_id)
        self._place(task_id, front=True)
        self.stats["released"] += 1
        return True

    def put_back(self, task_id: str, token: str) -> bool:
        """Give a leased item back to the front of its own partition, for the holder of its
        current lease only: at the score of its partition's first queued item (lowest score,
        then member), with a member that sorts before every other, so it leaves before each of
        its partition's items and after every item that left before that first one; with none
        queued, at max(the queue's clock, its partition's). Nothing is charged or credited."""
        if not self.holds_lease(task_id, token):
            return False
        self._to_partition_front(self._unlease(task_id), task_id)
        self.stats["released"] += 1
        return True

    def _to_partition_front(self, entry: Entry, task_id: str) -> None:
        own = [(e.score, e.member) for e in self.entries.values() if e.member]
        own = [sm for sm in own if self.entries[sm[1][17:]].partition == entry.partition]
        vt = max(self.cvt, self.pvt.get(entry.partition, 0.0))
        self.seq += 1
        entry.score = min(own)[0] if own else vt
        entry.member = f"0{FRONT_BASE - self.seq:015d}:{task_id}"

    def take(self, task_id: str, token: str) -> Taken | None:
        """Lease a named queued item out of turn, when it may start; the others keep their
        places, and the clock moves to the first item in line's score (which a dequeue now
        would take), never back."""
        entry = self.entries.get(task_id)
        if entry is None or (entry.member, entry.score) not in self.may_start():
            return None
        self.cvt = max(self.cvt, self.may_start()[0][1])
        entry.member, entry.token = "", token
        self._unqueued(entry.partition)
        self.stats["dequeued"] += 1
        self._reset_if_drained()
        return Taken(task_id, entry.payload, entry.timeouts)

    def reclaim(self) -> int:
        """Requeue every expired lease, oldest expiry first, as a fair (or front) placement, or
        at the front of its own partition as put_back places it."""
        expired, self.expired = self.expired, []
        for task_id in expired:
            entry = self._unlease(task_id)
            entry.timeouts += 1
            if self.reclaim_to == "partition_front":
                self._to_partition_front(entry, task_id)
            else:
                self._place(task_id, front=self.reclaim_to == "front")
        self.stats["reclaimed"] += len(expired)
        return len(expired)

    def credit(self, task_id: str, token: str, used: int) -> float:
        """Give a leased item's partition back the unused part of its cost: its fairly placed
        queued items and its virtual time move back by it, never below the queue's clock. A use
        beyond the weight moves the partition's virtual time on by the difference instead."""
        if not self.holds_lease(task_id, token):
            return 0.0
        entry = self.entries[task_id]
        if entry.credited or used == entry.weight:
            return 0.0
        if used > entry.weight:  # a charge: the partition's next items pay what it used beyond
            extra = entry.cost * (used - entry.weight) / entry.weight
            entry.credited = True
            if not self.length():  # a drained queue's clocks start again: nothing to charge
                return 0.0
            for other in self.entries.values():  # its queued fair items pay it too
                if other.partition == entry.partition and other.member.startswith("1"):
                    other.score += extra
            self.pvt[entry.partition] = max(self.pvt.get(entry.partition, 0.0), self.cvt) + extra
            return -extra
        credit = entry.cost * (entry.weight - used) / entry.weight
        entry.credited = True
        for other in self.entries.values():
            if other.partition == entry.partition and other.member.startswith("1"):
                other.score = max(min(self.cvt, other.score), other.score - credit)
        if entry.partition in self.pvt:
            self.pvt[entry.partition] = max(self.cvt, self.pvt[entry.partition] - credit)
        self.stats["credited"] += 1
        return credit

    def cancel(self, task_id: str) -> bool:
        """Remove a queued item, refunding its partition's clock where that reorders nothing."""
        entry = self.entries.get(task_id)
        if entry is None or not entry.member:
            return False
        if entry.partition in self.pvt:
            vt = self.pvt[entry.partition]
            if entry.member.startswith("1") and vt == entry.score + entry.cost:
                vt = entry.score
            if self.queued_in(entry.partition) == 1:
                vt = min(vt, self.cvt)
            self.pvt[entry.partition] = vt
        del self.entries[task_id]
        self._unqueued(entry.partition)
        self.stats["cancelled"] += 1
        self._reset_if_drained()
        return True

    def reshare(self, partition: str, share: float) -> int:
        """A new share: the partition's fairly placed queued items, in arrival order, charged
        again from its first one's start, each at that start plus the weight ahead of it over
        the share; its virtual time follows the last; front-placed and leased items keep
        theirs. Items enqueued later are charged at the new share."""
        self.shares[partition] = share
        fair = sorted(
            (e for e in self.entries.values() if e.partition == partition and e.member[:1] == "1"),
            key=lambda e: e.member,
        )
        if not fair:
            return 0
        first, before = fair[0].score, 0
        for entry in fair:
            entry.cost = entry.weight / share
            entry.score = first + before / share
            before += entry.weight
        self.pvt[partition] = first + before / share
        return len(fair)

    def promote(self, task_id: str) -> bool:
        """Move a queued item ahead of every other, at the lowest queued score; pvt unchanged."""
        entry = self.entries.get(task_id)
        if entry is None or not entry.member:
            return False
        self._place(task_id, front=True)
        self.stats["promoted"] += 1
        return True
