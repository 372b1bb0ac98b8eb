"""FairQueue: the virtual-time round-robin queue on Redis, without Celery.

Each item belongs to a partition (a user, an account). An item's virtual start time is
max(the queue's virtual time, its partition's virtual time); the partition's virtual time then
moves on by the item's cost, weight / share. Dequeue leases the item with the lowest start time,
equal times in arrival order. See docs/vtrr.md for the keys and the guarantees.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from functools import partial
from typing import Any

from redis import Redis

from app.vtrr.fleet_cards import RESERVATION_GRACE_S, FleetCards
from app.vtrr.group import QueueGroup
from app.vtrr.hooks import Hooks, NoHooks
from app.vtrr.item import Item, Lease, Shares, enqueue_args, kinds_in, share_of
from app.vtrr.keys import Keys
from app.vtrr.layout import FAIR, FIRST, FRONT, LAST, Placement
from app.vtrr.limits import Limits, Woken, check_half_life
from app.vtrr.line import QueueLine
from app.vtrr.replicated import REPLICA_PATIENCE_S, REPLICA_WAIT_MS, until_replicated
from app.vtrr.scripts import Scripts
from app.vtrr.slots import Slot
from app.vtrr.wire import (
    as_text,
    credit_args,
    credit_of,
    micros,
    seconds_of,
)

RECLAIM_BATCH = 100


#: Calls that skip the fair path's try after it answered None (a queue with limits pays it once).
FULL_PATH_CALLS = 32


class FairQueue(QueueLine, FleetCards):
    """One fair queue: enqueue, dequeue (lease), ack, extend, release, put back, take, credit,
    reshare, reclaim and limits; its line's reads and an operator's changes are QueueLine's."""

    def __init__(
        self,
        redis_client: Redis,
        name: str,
        *,
        lease_seconds: float = 3900,
        shares: Shares | None = None,
        reclaim_to: Placement = FAIR,
        reclaim_on_dequeue: bool = True,
        wake_on_enqueue: bool = False,
        replicas: int = 0,
        limits_group: str | None = None,
        usage_half_life_s: float | None = None,
        kind: str | None = None,
        slot: Slot | None = None,
        reservation_grace_s: float = RESERVATION_GRACE_S,
        reserves: bool = True,
    ) -> None:
        if not lease_seconds > 0:
            raise ValueError(f"lease_seconds must be positive, got {lease_seconds!r}")
        #: With a half-life, a partition that comes back starts behind the clock by what its
        #: items used lately (decayed), over its share: see docs/vtrr.md, "Memory".
        self.usage_half_life_s = check_half_life(usage_half_life_s)
        self.name = name
        #: The kind of consumer this is (pool.py): it leases items that name no kinds, or its own.
        self.kind = kind
        #: The card this consumer stands for, if any (slots.py: items of several cards).
        self.slot = slot
        #: How long a reservation waits past its start before it is placed again, and whether
        #: this consumer's ticks keep any (False: an item of several cards waits for free ones).
        self.reservation_grace_s, self.reserves = reservation_grace_s, reserves
        where = None if slot is None else (slot.host, slot.card)
        self.keys = Keys.for_queue(name, limits_group, kind, where)
        self.limits_group = limits_group
        self.lease_seconds = lease_seconds
        self.redis = redis_client
        self._shares = shares
        #: Where expired leases go back, and how many a lease reclaims first (0: none).
        self.reclaim_to: Placement = reclaim_to
        self.reclaim_limit = RECLAIM_BATCH if reclaim_on_dequeue else 0
        self._wake = wake_on_enqueue
        #: Replicas that must have an item's end before a worker's drain leases the next (WAIT).
        self.replicas = replicas
        self.scripts = Scripts(redis_client, self.keys)  # the way into this queue's Lua
        self._full_calls_left = 0  # calls to make without the fair path's try first

    # -- what the Celery layer sets, and what a group of queues reads (group.py) ----------------
    trigger_cap = -1  # most triggers kept in the broker (-1: this queue publishes none)
    hooks: Hooks = NoHooks()  # the application's Lua in step.lua (a VTRRQueue's `hooks=`)

    def publish_triggers(self, count: int) -> None:
        """Send count triggers; a plain FairQueue has no broker, so there is nothing to send."""

    # -- the job's life ---------------------------------------------------------------------------
    def enqueue(
        self,
        partition_key: str,
        items: Iterable[Item],
        *,
        front: bool = False,
        max_queued: int | None = None,
    ) -> list[str]:
        """Queue items of one partition in one atomic call; returns their ids.

        Raises, writing nothing, DuplicateTaskError when an id is already queued or in flight,
        and QueueFullError when the partition would have more than max_queued items queued.
        """
        items = list(items)
        ids, args = enqueue_args(partition_key, self._shares, items)
        if not ids:
            return []
        placement = FRONT if front else FAIR
        limit = -1 if max_queued is None else max_queued
        # 0 hook arguments: no hook runs (see AsyncFairQueue.admit_and_enqueue)
        reply = self.scripts.run(
            "enqueue",
            partition_key,
            self.trigger_cap,
            placement,
            int(self._wake),
            limit,
            self.usage_half_life_s or 0,
            0,
            *args,
        )
        self.publish_triggers(int(reply[0]))
        self.trigger_kinds(kinds_in(items))
        return ids

    def trigger_kinds(self, kinds: Iterable[str]) -> None:
        """Wake consumers of these kinds, whose items were just queued: a plain FairQueue has no
        broker (a VTRRQueue tops up each kind's own triggers)."""

    def dequeue(self, *, from_rear: bool = False) -> Lease | None:
        """Lease the next item in fair order (or the last one), or None when nothing is queued."""
        return self._take(consumes_trigger=False, from_rear=from_rear)

    def _take(self, *, consumes_trigger: bool, from_rear: bool = False) -> Lease | None:
        token = secrets.token_hex(16)
        plain = self.kind is None  # (a consumer of a kind looks at its pools too: dequeue.lua)
        if (
            plain
            and not (consumes_trigger or from_rear or self.trigger_cap >= 0)
            and self._fair_path()
        ):
            # the fair path, without the limits' keys: None where it needs them (dequeue.lua)
            us = micros(self.lease_seconds)
            fair_path = "dequeue_unlimited" if self.slot is None else "dequeue_card"
            reply = self.scripts.run(fair_path, us, token, self.reclaim_limit)
            if reply is not None:
                return self._leased(reply, token)
            self._full_calls_left = FULL_PATH_CALLS
        reply = self.scripts.run("dequeue", *self._lease_args(token, consumes_trigger, from_rear))
        return self._leased(reply, token)

    def _lease_args(self, token: str, consumes_trigger: bool, from_rear: bool) -> list[str | int]:
        """dequeue.lua's ARGV."""
        return [
            micros(self.lease_seconds),
            token,
            int(consumes_trigger),
            LAST if from_rear else FIRST,
            self.reclaim_limit,
            self.trigger_cap,
            self.reclaim_to,
        ]

    def _fair_path(self) -> bool:
        """Whether to try the fair path's call (no limits' keys) before the full one."""
        if self._full_calls_left:
            self._full_calls_left -= 1
            return False
        return True

    def _leased(self, reply: Any, token: str) -> Lease | None:
        """dequeue.lua's reply: send the triggers it asks for; the lease, or None."""
        self.publish_triggers(int(reply[0]))
        if len(reply) == 1:
            return None
        task_id, payload, timeouts, expiry = (as_text(x) for x in reply[1:])
        return Lease(task_id, token, payload, int(timeouts), seconds_of(expiry))

    def ack(self, task_id: str, token: str) -> bool:
        """Finish a leased item; False when the token is not its current lease (nothing changes)."""
        acked = self.scripts.run("ack", task_id, token) if self._fair_path() else None
        if acked is None:  # its partition has limits: ack.lua left it to the ack that names them
            self._full_calls_left = FULL_PATH_CALLS
            acked, triggers = self.scripts.run("ack_limited", task_id, token, self.trigger_cap)
            self.publish_triggers(int(triggers))
        return bool(acked)

    def ack_and_lease(
        self, task_id: str, token: str, *, consumes_trigger: bool = False
    ) -> tuple[bool, Lease | None]:
        """ack(task_id, token), then dequeue(), in one call: (acked, the next lease or None).
        A worker that takes item after item saves a round trip and a script per item."""
        next_token = secrets.token_hex(16)
        args = self._lease_args(next_token, consumes_trigger, from_rear=False)
        acked, *reply = self.scripts.run("ack_lease", task_id, token, *args)
        return bool(acked), self._leased(reply, next_token)

    def extend(self, task_id: str, token: str, seconds: float | None = None) -> bool:
        """Push a live lease's expiry to now + seconds (default lease_seconds); False if stale."""
        if seconds is not None and not seconds > 0:
            raise ValueError(f"seconds must be positive, got {seconds!r}")
        us = micros(seconds or self.lease_seconds)
        reply = self.scripts.run("renew", task_id, token, us, 0)
        return reply is not None

    def resume(self, task_id: str, token: str) -> Lease | None:
        """Renew a lease in full and hand its item back, or None when the lease is not current."""
        reply = self.scripts.run("renew", task_id, token, micros(self.lease_seconds), 1)
        if reply is None:
            return None
        expiry, payload, timeouts = (as_text(x) for x in reply)
        return Lease(task_id, token, payload, int(timeouts), seconds_of(expiry))

    def began(self, task_id: str, token: str) -> bool:
        """The leased item's run has begun, later than its lease: what it holds against its
        partition's `most_held` limit runs down from now (the wait before used none of it).
        False when the token is not the item's current lease, or the item holds nothing
        against a limit."""
        return bool(self.scripts.run("began", task_id, token))

    def credit(self, task_id: str, token: str, used_weight: int) -> float:
        """Credit the partition of a leased item with the part of its weight it did not use.

        The item was charged weight / share when it was queued; its partition's clock and its
        items queued (the first CREDIT_MOVES of them) move back by the unused part, never below
        the queue's virtual time. Returns the virtual time credited: 0.0 when the token is not
        the item's current lease, the item was already credited since it was last charged, or
        used_weight is not below its weight. used_weight must be a positive integer.
        """
        return credit_of(self.scripts.run("credit", *credit_args(task_id, token, used_weight)))

    def reshare(self, partition_key: str, share: float) -> int:
        """Charge the partition's queued items again at a new share, at once (its share changed:
        the caller's `shares` must give the new one to items enqueued from now on).

        Its first fairly placed item keeps its start; the others follow it at weight / share
        apart, and its virtual time follows the last; items at the front or in flight, and
        every other partition's items, do not move. One call, O(n log N) for its n items
        queued. Returns how many items were charged again (0: none, and nothing changed);
        ValueError for a share that is not positive and finite, before Redis is touched.
        """
        share = share_of({partition_key: share}, partition_key)
        return int(self.scripts.run("reshare", partition_key, repr(share)))

    def release(self, task_id: str, token: str) -> bool:
        """Give a leased item back to the front of the queue; False when the token is stale."""
        released, triggers = self.scripts.run("release", task_id, token, self.trigger_cap)
        self.publish_triggers(int(triggers))
        return bool(released)

    def put_back(self, task_id: str, token: str) -> bool:
        """Give a leased item back to the front of its own partition, not of the whole queue
        (a preempted run): it leaves before its partition's other queued items, and where that
        partition's next one would among the others'. It keeps what it was charged and is not
        credited (a later credit returns the unused part once); limits apply to it as to any
        queued item. Counted as released. False when the token is stale: nothing changes.
        With replicas, it returns once that many have it (NotReplicatedError past
        REPLICA_PATIENCE_S), as a step's end does: a failover cannot take the requeue back."""
        args: list[str | int] = [task_id, token, self.trigger_cap]
        if self.replicas:
            keys, wanted = self.scripts.keys("put_back"), (self.replicas, REPLICA_WAIT_MS)
            call = partial(self.scripts.run_replicated, "put_back", keys, args, wanted)
            reply = until_replicated(call, self.replicas, REPLICA_PATIENCE_S)
        else:
            reply = self.scripts.run("put_back", *args)
        put_back, triggers = reply
        self.publish_triggers(int(triggers))
        return bool(put_back)

    def take(self, task_id: str) -> Lease | None:
        """Lease one named queued item now, wherever it is in line, as dequeue would lease it;
        None when it is not queued (unknown, leased) or its partition's limits hold it back.
        The others keep their order, and the queue's virtual time moves to the first queued
        item's start (where a dequeue now would move it), never back. Reclaims nothing."""
        token = secrets.token_hex(16)
        reply = self.scripts.run(
            "take", task_id, micros(self.lease_seconds), token, self.trigger_cap
        )
        return self._leased(reply, token)

    def reclaim(self) -> int:
        """Put every item whose lease has expired back into the queue; returns how many."""
        return self._reclaim(self.trigger_cap)[0]

    def _reclaim(self, trigger_cap: int) -> tuple[int, int]:
        """Reclaim in batches, topping triggers up to trigger_cap; returns (reclaimed, queued)."""
        total = 0
        while True:
            n, triggers, queued = self.scripts.run(
                "reclaim", RECLAIM_BATCH, self.reclaim_to, trigger_cap
            )
            self.publish_triggers(int(triggers))
            total += int(n)
            if int(n) < RECLAIM_BATCH:
                return total, int(queued)

    # -- per-partition limits (app/vtrr/limits.py) ------------------------------------------------
    def set_limits(self, partition_key: str, limits: Limits) -> None:
        """Set (or with Limits(), clear) a partition's limits, in force for every lease after
        this call; its queued items are held back or let go at once."""
        reply = self.scripts.run("limit", partition_key, *limits.args(), self.trigger_cap)
        self.publish_triggers(int(reply[0]))

    def limits(self, partition_key: str) -> Limits:
        """A partition's limits (Limits() when it has none)."""
        return Limits.read(self.redis.hget(self.keys.limits, partition_key))

    def held_back(self) -> int:
        """How many queued items wait because their partition's limits hold it back now (one
        read per limited partition: for monitoring, not for the hot path)."""
        limited = [as_text(p) for p in self.redis.hkeys(self.keys.limits)]
        with self.redis.pipeline(transaction=True) as pipe:
            for p in limited:
                pipe.hexists(self.keys.representatives, p)
                pipe.hget(self.keys.partition_queued, p)
            replies = pipe.execute()
        pairs = zip(replies[::2], replies[1::2], strict=True)
        return sum(int(queued or 0) for rep, queued in pairs if not rep)

    def wake(self) -> Woken:
        """Let every limited partition that now may start its next item do so; says when the
        next wait ends. Call it then, whoever serves a queue whose partitions have limits (the
        queues of a limits group: wake_together)."""
        return QueueGroup([self]).wake()
