"""Claims of several cards under random operations and random kills (docs/vtrr.md, "Items of
several cards"): whatever the order of enqueues, ticks, leases, acks, lends and lapsed leases
(a worker killed at any step), never is a card held for two items, never does an item in flight
hold some of its cards but not all (all on one host), every card is free once the last lease
ends, and the queue always drains."""

from __future__ import annotations

import itertools

import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from app.vtrr import FairQueue, Item, Lease, Slot

HOSTS = {"h1": 3, "h2": 2}
TTL = 60.0
LAPSE_NOW_S = 1e-6


class GangMachine(RuleBasedStateMachine):
    def __init__(self, client: redis.Redis) -> None:
        super().__init__()
        client.flushdb()
        self.r = client
        self.cards = [
            FairQueue(client, "jobs", slot=Slot(host, str(i), f"w{i}@{host}"))
            for host, n in HOSTS.items()
            for i in range(n)
        ]
        for c in self.cards:
            c.tick(TTL)
        self.leases: dict[str, Lease] = {}  # task id -> the lease its consumer holds
        self.ids = itertools.count()

    @rule(
        size=st.integers(1, 3),
        span=st.sampled_from([None, 1.0, 100.0, 10_000.0]),
        partition=st.sampled_from("PQ"),
    )
    def enqueue(self, size: int, span: float | None, partition: str) -> None:
        task = f"t{next(self.ids)}"
        item = Item(task, id=task, weight=size * 1000, size=size, span=span)
        self.cards[0].enqueue(partition, [item])

    @rule(i=st.integers(0, 4))
    def lease(self, i: int) -> None:
        got = self.cards[i].dequeue()
        if got is not None:
            self.leases[got.task_id] = got

    @rule(i=st.integers(0, 4))
    def tick(self, i: int) -> None:
        got = self.cards[i].tick(TTL)
        if got.claimed is not None:
            self.leases[got.claimed.task_id] = got.claimed
        if got.held is not None and got.held.role == "lent":
            self.cards[i].lend_ready(got.held.task_id)

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        if self.leases:
            task = data.draw(st.sampled_from(sorted(self.leases)))
            lease = self.leases.pop(task)
            self.cards[0].ack(lease.task_id, lease.token)

    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        """The worker holding a lease dies: its lease lapses and is reclaimed."""
        if self.leases:
            task = data.draw(st.sampled_from(sorted(self.leases)))
            lease = self.leases.pop(task)
            if self.cards[0].extend(lease.task_id, lease.token, LAPSE_NOW_S):
                self.cards[0].reclaim()

    def _held(self) -> dict[str, list[str]]:
        """Each item in flight's card keys (F_HELD)."""
        found: dict[str, list[str]] = {}
        for task in self.r.zrange(self.cards[0].keys.inflight, 0, -1):
            task_id = task.decode() if isinstance(task, bytes) else str(task)
            raw = self.r.hget(self.cards[0].keys.item_key(task_id), "g")
            text = raw.decode() if isinstance(raw, bytes) else raw
            found[task_id] = text.split() if text else []
        return found

    @invariant()
    def cards_are_held_whole_and_once(self) -> None:
        held = self._held()
        named: dict[str, str] = {}
        for task_id, keys in held.items():
            size = int(self.r.hget(self.cards[0].keys.item_key(task_id), "z") or 1)
            if size > 1:
                assert len(keys) == size, f"{task_id} holds {keys} of {size} cards"
                assert len({k.rsplit(":", 2)[-2] for k in keys}) == 1, "cards of two hosts"
            for key in keys:
                assert key not in named, f"{key} held for {named.get(key)} and {task_id}"
                named[key] = task_id
        for c in self.cards:
            state = self.r.get(c.keys.card)
            if state is not None:
                text = state.decode() if isinstance(state, bytes) else state
                owner = text.split(" ")[1]
                assert named.get(c.keys.card) == owner, f"{c.keys.card} names {owner} not in flight"

    def teardown(self) -> None:
        for lease in self.leases.values():
            self.cards[0].ack(lease.task_id, lease.token)
        self.leases.clear()
        for c in self.cards:
            assert c.card_held() is None and self.r.get(c.keys.card) is None
        for _ in range(200):  # the queue drains: every item runs, one of several cards too
            if self.cards[0].length() == 0:
                break
            for c in self.cards:
                tick = c.tick(TTL)
                if tick.claimed is not None:
                    c.ack(tick.claimed.task_id, tick.claimed.token)
                single = c.dequeue()
                if single is not None:
                    c.ack(single.task_id, single.token)
        assert self.cards[0].length() == 0, "the queue did not drain"
        assert all(self.r.get(c.keys.card) is None for c in self.cards)


def test_claims_hold_under_random_operations_and_kills(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, single_connection_client=True)
    try:
        run_state_machine_as_test(
            lambda: GangMachine(client),  # type: ignore[arg-type]
            settings=settings(
                max_examples=60,
                stateful_step_count=40,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    finally:
        client.close()
