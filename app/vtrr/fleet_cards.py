"""FleetCards: a slotted consumer's calls about its fleet's cards (slots.py says what they are):
its tick, the cards of an item in flight, a lender's ready, the reservations. FairQueue is one."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis import Redis

from app.vtrr.item import Lease
from app.vtrr.keys import Keys
from app.vtrr.layout import Field
from app.vtrr.scripts import Scripts
from app.vtrr.slots import (
    HELD_FIELD,
    Held,
    Placement,
    Reservation,
    Slot,
    card_of,
    held_of,
    reservation_of,
)
from app.vtrr.wire import as_text, micros, seconds_of

#: How long a reservation may go unfulfilled past its start before it is placed again (s),
#: unless the queue is told otherwise (FairQueue's reservation_grace_s).
RESERVATION_GRACE_S = 60.0


@dataclass(frozen=True)
class Tick:
    """What a tick saw: what holds the consumer's card besides its own run (None: nothing), and
    the item it leased for the consumer to lead, if it claimed one."""

    held: Held | None
    claimed: Lease | None


class FleetCards:
    """A consumer's calls about the cards of its fleet (the queues of its limits group)."""

    name: str
    redis: Redis
    keys: Keys
    scripts: Scripts
    kind: str | None
    slot: Slot | None
    lease_seconds: float
    trigger_cap: int
    reservation_grace_s: float
    reserves: bool
    publish_triggers: Callable[[int], None]

    def _slot(self) -> Slot:
        if self.slot is None:
            raise ValueError(f"queue {self.name!r}: this consumer has no slot (FairQueue slot=)")
        return self.slot

    def tick(self, seen_ttl_s: float) -> Tick:
        """Say this consumer's card is live (for seen_ttl_s), keep the reservations of the items
        of several cards whose turn has come, and where this card's host can start one now,
        lease it with this card leading (lua/tick.lua)."""
        slot, token = self._slot(), secrets.token_hex(16)
        reply = self.scripts.run(
            "tick",
            micros(seen_ttl_s),
            micros(self.lease_seconds),
            token,
            self.kind or "",
            slot.worker,
            micros(self.reservation_grace_s),
            self.trigger_cap,
            int(self.reserves),
        )
        role = as_text(reply[0])
        if not role:
            return Tick(None, None)
        held = Held("lead" if role == "lead" else "lent", as_text(reply[1]), bool(int(reply[2])))
        if len(reply) == 3:
            return Tick(held, None)
        self.publish_triggers(int(reply[3]))
        payload, timeouts, expiry = (as_text(x) for x in reply[4:7])
        lease = Lease(held.task_id, token, payload, int(timeouts), seconds_of(expiry))
        return Tick(held, lease)

    def card_held(self) -> Held | None:
        """What holds this consumer's card besides its own run, if anything (one GET)."""
        return held_of(self.redis.get(self.keys.card)) if self.slot is not None else None

    def placement(self, task_id: str) -> Placement | None:
        """The cards an item in flight holds, its leader's first; None when it holds none (not
        in flight, or leased by a consumer without a slot)."""
        held = self.redis.hget(self.keys.item_key(task_id), HELD_FIELD)
        if not held:
            return None
        places = [card_of(key) for key in as_text(held).split()]
        host = places[0][0]
        seen: dict[Any, Any] = self.redis.hgetall(f"{self.keys.fleet}slots:{host}")
        named = {as_text(k): as_text(v).split(" ")[2] for k, v in seen.items()}
        cards = tuple(card for _, card in places)
        return Placement(host, cards, tuple(named.get(card, card) for card in cards))

    def lend_ready(self, task_id: str) -> bool:
        """This consumer's card, lent to task_id, is ready: its consumer let go of all it held
        there. False when the card is not lent to that item (any more)."""
        self._slot()
        return bool(self.scripts.run("lend", task_id))

    def lenders_ready(self, task_id: str) -> bool:
        """Whether every card lent to an item in flight said it is ready (its leader's run may
        start); False when the item holds no cards."""
        held = self.redis.hget(self.keys.item_key(task_id), HELD_FIELD)
        if not held:
            return False
        states = self.redis.mget(as_text(held).split()[1:])
        found = [held_of(raw) for raw in states]
        return all(h is not None and h.task_id == task_id and h.ready for h in found)

    def reservations(self) -> dict[str, Reservation]:
        """The reservations of the fleet's hosts, by the id of the item each is kept for."""
        hosts = sorted(as_text(h) for h in self.redis.smembers(f"{self.keys.fleet}hosts"))
        if not hosts:
            return {}
        raws = self.redis.mget([f"{self.keys.fleet}resv:{host}" for host in hosts])
        found = [reservation_of(host, raw) for host, raw in zip(hosts, raws, strict=True)]
        kept = [one for one in found if one is not None]
        with self.redis.pipeline(transaction=False) as pipe:
            for _, _, item in kept:
                pipe.hmget(item, [Field.MEMBER.value, Field.LEASE.value])
            states = pipe.execute()
        # a reservation counts while its item is queued (it may be another queue's of the group)
        queued = (member is not None and lease is None for member, lease in states)
        return {task: r for (task, r, _), q in zip(kept, queued, strict=True) if q}

    def leave(self) -> None:
        """Forget this consumer's card as live (a worker that stops on purpose): no claim or
        reservation counts it until its next tick. What holds it stays held."""
        slot = self._slot()
        self.redis.hdel(f"{self.keys.fleet}slots:{slot.host}", slot.card)
