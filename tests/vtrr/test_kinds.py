"""Kinds of consumer (docs/vtrr.md, "Kinds"): an item that names kinds is leased only by a
consumer of one of them, a consumer never idles while an item it may take waits, and items that
compete for the same consumers leave in fair order."""

from __future__ import annotations

import pytest
import redis

from app.vtrr import FairQueue, Item, Limits
from app.vtrr.pool import pool_name


def consumer(r: redis.Redis, kind: str | None) -> FairQueue:
    return FairQueue(r, "jobs", kind=kind)


def put(q: FairQueue, partition: str, payload: str, kinds: tuple[str, ...] | None) -> str:
    return q.enqueue(partition, [Item(payload, id=payload, kinds=kinds)])[0]


def taken(q: FairQueue) -> str | None:
    lease = q.dequeue()
    if lease is None:
        return None
    assert q.ack(lease.task_id, lease.token)
    return lease.payload


def test_a_consumer_leases_only_items_its_kind_may_take(r: redis.Redis) -> None:
    producer = consumer(r, None)
    put(producer, "A", "big-only", ("big",))
    put(producer, "A", "any", None)
    small, big, plain = consumer(r, "small"), consumer(r, "big"), consumer(r, None)
    assert taken(small) == "any"  # the big-only item is never the small card's
    assert taken(small) is None
    assert taken(plain) is None  # a consumer without a kind takes only items that name none
    assert taken(big) == "big-only"
    assert producer.length() == 0


def test_a_flood_for_one_kind_does_not_delay_anothers_item(r: redis.Redis) -> None:
    """A floods big-only items first (lower start times); B's small-capable item still goes at
    the small card's first lease, and none of A's spills onto it."""
    producer = consumer(r, None)
    for i in range(20):
        put(producer, "A", f"A{i}", ("big",))
    put(producer, "B", "B0", ("big", "small"))
    small = consumer(r, "small")
    assert taken(small) == "B0"
    assert taken(small) is None
    assert producer.length() == 20


def test_items_that_compete_for_the_same_consumers_leave_in_fair_order(r: redis.Redis) -> None:
    producer = consumer(r, None)
    for i in range(3):
        put(producer, "A", f"A{i}", ("small",))
        put(producer, "B", f"B{i}", ("big", "small"))
    put(producer, "C", "C0", ("big",))
    small = consumer(r, "small")
    assert [taken(small) for _ in range(6)] == ["A0", "B0", "A1", "B1", "A2", "B2"]
    assert taken(consumer(r, "big")) == "C0"


def test_a_newcomer_starts_at_its_kinds_clock_not_at_a_busier_kinds(r: redis.Redis) -> None:
    """The big cards run far ahead (A's items at 0..9); the small card served only A's first
    small item. C's newcomer item for small starts at the small clock: next on the small card,
    before the rest of A's small backlog."""
    producer = consumer(r, None)
    for i in range(10):
        put(producer, "B", f"B{i}", ("big",))
    for i in range(5):
        put(producer, "A", f"A{i}", ("small",))
    big, small = consumer(r, "big"), consumer(r, "small")
    assert [taken(big) for _ in range(9)] == [f"B{i}" for i in range(9)]
    assert taken(small) == "A0"
    put(producer, "C", "C0", ("small",))
    assert taken(small) == "C0"
    assert [taken(small) for _ in range(4)] == ["A1", "A2", "A3", "A4"]


def test_the_first_class_freed_takes_an_item_that_several_may_run(r: redis.Redis) -> None:
    producer = consumer(r, None)
    put(producer, "A", "A0", ("big", "small"))
    assert taken(consumer(r, "big")) == "A0"
    assert taken(consumer(r, "small")) is None


def test_a_drained_queue_forgets_its_pools_and_clocks(r: redis.Redis) -> None:
    producer = consumer(r, None)
    put(producer, "A", "A0", ("big",))
    big = consumer(r, "big")
    assert taken(big) == "A0"
    keys = big.keys
    assert not r.exists(keys.pools, keys.kinds, keys.kclock, keys.kpools)
    assert not r.exists(keys.pool + pool_name(["big"]))


def test_cancel_position_promote_and_take_find_a_pooled_item(r: redis.Redis) -> None:
    producer = consumer(r, None)
    for i in range(3):
        put(producer, "A", f"A{i}", ("small",))
    put(producer, "B", "B0", ("small",))
    assert producer.position("B0") == 1  # its place among the items of its own line
    assert producer.promote("A2")
    assert producer.cancel("A1")
    lease = producer.take("B0")
    assert lease is not None and lease.payload == "B0"
    small = consumer(r, "small")
    assert [taken(small), taken(small), taken(small)] == ["A2", "A0", None]
    assert producer.ack("B0", lease.token)


def test_a_released_or_reclaimed_item_goes_back_to_its_pool(r: redis.Redis) -> None:
    producer = consumer(r, None)
    put(producer, "A", "A0", ("big",))
    big, small = consumer(r, "big"), consumer(r, "small")
    lease = big.dequeue()
    assert lease is not None
    assert big.release(lease.task_id, lease.token)
    assert taken(small) is None
    assert taken(big) == "A0"


def test_a_credit_moves_a_partitions_pooled_items_forward(r: redis.Redis) -> None:
    """A0 (weight 20) used a tenth of it: A's queued items move back by 18, A1 from 20 to 2,
    ahead of B1 (10), where without the credit it would follow B1 and tie with B2."""
    producer = consumer(r, None)
    for i, weight in enumerate([20, 10, 10]):
        producer.enqueue("A", [Item(f"A{i}", id=f"A{i}", weight=weight, kinds=("small",))])
        producer.enqueue("B", [Item(f"B{i}", id=f"B{i}", weight=10, kinds=("small",))])
    small = consumer(r, "small")
    lease = small.dequeue()
    assert lease is not None and lease.payload == "A0"
    assert small.credit(lease.task_id, lease.token, 2) == pytest.approx(18.0)
    assert small.ack(lease.task_id, lease.token)
    assert [taken(small) for _ in range(5)] == ["B0", "A1", "B1", "A2", "B2"]


def test_a_limited_partitions_pooled_item_waits_for_its_limit(r: redis.Redis) -> None:
    producer = consumer(r, None)
    producer.set_limits("A", Limits(most_in_flight=1))
    put(producer, "A", "A0", ("small",))
    put(producer, "A", "A1", ("small",))
    small = consumer(r, "small")
    first = small.dequeue()
    assert first is not None and first.payload == "A0"
    assert small.dequeue() is None  # A may hold one at a time
    assert small.ack(first.task_id, first.token)
    assert taken(small) == "A1"


def test_bad_kinds_are_refused_before_redis_is_touched(r: redis.Redis) -> None:
    producer = consumer(r, None)
    for kinds in [(), ("a,b",), ("",), "big"]:
        with pytest.raises(ValueError, match="kind"):
            producer.enqueue("A", [Item("x", kinds=kinds)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a kind is"):
        FairQueue(r, "jobs", kind="no spaces")
    assert producer.length() == 0


def test_an_items_price_multiplies_what_its_partition_is_charged(r: redis.Redis) -> None:
    """A's items cost twice B's (price 2.0, a dearer kind): B gets two turns for each of A's."""
    q = consumer(r, None)
    for i in range(3):
        q.enqueue("A", [Item(f"A{i}", id=f"A{i}", price=2.0)])
    for i in range(4):
        q.enqueue("B", [Item(f"B{i}", id=f"B{i}")])
    assert [taken(q) for _ in range(7)] == ["A0", "B0", "B1", "A1", "B2", "B3", "A2"]


def test_a_credit_counts_the_used_weight_at_the_items_price(r: redis.Redis) -> None:
    """Charged 10 at price 2.0 (20): a used 20 credits nothing, a used 10 (a card of half the
    price) gives half back, and a used 30 charges the partition 10 more."""
    q = consumer(r, None)
    for i in range(4):
        q.enqueue("A", [Item(f"A{i}", id=f"A{i}", weight=10, price=2.0)])
    credits = []
    for used in (20, 10, 30):
        lease = q.dequeue()
        assert lease is not None
        credits.append(q.credit(lease.task_id, lease.token, used))
        assert q.ack(lease.task_id, lease.token)
    assert credits == [0.0, 10.0, -10.0]


def test_a_bad_price_is_refused_before_redis_is_touched(r: redis.Redis) -> None:
    q = consumer(r, None)
    for price in (0, -1.0, float("nan"), float("inf"), True, "2"):
        with pytest.raises(ValueError, match="price"):
            q.enqueue("A", [Item("x", price=price)])  # type: ignore[arg-type]
    assert q.length() == 0
