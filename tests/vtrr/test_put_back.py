"""put_back: a leased item goes back to the front of its own partition (a preempted run), not of
the whole queue, keeps what it was charged, and is credited once at its end."""

from __future__ import annotations

import pytest
import redis

from app.vtrr import FairQueue, Item, Lease, Limits
from tests.vtrr.helpers import drain, fill, take


def lease_of(q: FairQueue, task_id: str) -> Lease:
    """Dequeue until the named item is leased (the others stay leased)."""
    while (lease := take(q)).task_id != task_id:
        pass
    return lease


def everything(r: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key of the database, serialized: equal exactly when nothing changed."""
    return {key: r.dump(key) for key in r.scan_iter()}


def test_it_does_not_jump_another_partitions_item_ahead(r: redis.Redis) -> None:
    """B's first item starts before A's next one: the put-back item follows it, not leads it
    (release would put it before B0)."""
    q = FairQueue(r, "jobs")
    fill(q, "A", 2)
    fill(q, "B", 2)
    a0 = take(q)
    assert a0.payload == "A0"
    assert q.put_back(a0.task_id, a0.token)
    assert drain(q) == ["B0", "A0", "A1", "B1"]


def test_it_goes_first_among_its_own_partitions_items(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 4)
    first = take(q)
    second = take(q)
    assert q.put_back(first.task_id, first.token)
    assert q.put_back(second.task_id, second.token)  # the latest put back leaves first
    assert drain(q) == ["A1", "A0", "A2", "A3"]


def test_with_nothing_of_its_partition_queued_it_starts_where_its_next_item_would(
    r: redis.Redis,
) -> None:
    """A0 (weight 3) was charged 0 to 3; put back with nothing of A queued, it starts at 3,
    where A's next item would, among B's items at 0, 2, 4, 6, and A is charged nothing more."""
    q = FairQueue(r, "jobs")
    fill(q, "A", 1, weight=3)
    fill(q, "B", 4, weight=2)
    a0 = take(q)
    assert q.put_back(a0.task_id, a0.token)
    assert r.zscore(q.keys.queue, r.hget(q.keys.item_key(a0.task_id), "m")) == 3.0
    assert float(r.hget(q.keys.partition_virtual_time, "A")) == 3.0
    assert drain(q) == ["B0", "B1", "A0", "B2", "B3"]


def test_with_its_partition_behind_the_clock_it_starts_at_the_clock(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 1)
    fill(q, "B", 4)
    a0 = take(q)
    assert [take(q).payload for _ in range(3)] == ["B0", "B1", "B2"]  # the clock is at 2
    assert q.put_back(a0.task_id, a0.token)
    assert r.zscore(q.keys.queue, r.hget(q.keys.item_key(a0.task_id), "m")) == 2.0
    assert drain(q) == ["A0", "B3"]


def test_a_stale_token_is_refused_and_changes_nothing(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 2)
    lease = take(q)
    assert q.release(lease.task_id, lease.token)
    again = take(q)
    before = everything(r)
    assert not q.put_back(lease.task_id, lease.token)
    assert not q.put_back("unknown", again.token)
    assert everything(r) == before
    assert q.pending() == 1


def test_it_counts_as_released_keeps_its_timeouts_and_its_payload(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 1)
    lease = take(q)
    assert q.put_back(lease.task_id, lease.token)
    assert (q.length(), q.pending(), q.queued_weight()) == (1, 0, 1)
    again = take(q)
    assert (again.task_id, again.payload, again.timeouts) == (lease.task_id, "A0", 0)
    assert q.ack(again.task_id, again.token)
    stats = q.stats()
    assert (stats["released"], stats["dequeued"], stats["acked"]) == (1, 2, 1)
    assert stats["reclaimed"] == 0


def test_at_its_partitions_limit_it_is_parked_and_its_slot_is_freed(r: redis.Redis) -> None:
    """A holds two items in flight when its limit drops to one: the one put back frees a slot
    but must wait, parked, for the other; then it goes before A's other queued item."""
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_in_flight=2))
    fill(q, "A", 3)
    fill(q, "B", 3)
    a0, _, a1 = take(q), take(q), take(q)
    assert (a0.payload, a1.payload) == ("A0", "A1")
    q.set_limits("A", Limits(most_in_flight=1))
    assert q.put_back(a0.task_id, a0.token)
    assert r.hlen(q.keys.live + "A") == 1  # only A1 in flight now
    assert q.held_back() == 2  # A0 and A2, both parked
    assert r.zscore(q.keys.queue, r.hget(q.keys.item_key(a0.task_id), "m")) is None
    assert [take(q).payload for _ in range(2)] == ["B1", "B2"]
    assert q.dequeue() is None
    assert q.ack(a1.task_id, a1.token)
    assert drain(q) == ["A0", "A2"]


def test_with_room_under_its_limit_it_may_start_at_once(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_in_flight=1))
    fill(q, "A", 2)
    a0 = take(q)
    assert q.held_back() == 1
    assert q.put_back(a0.task_id, a0.token)
    assert r.hlen(q.keys.live + "A") == 0
    assert r.zscore(q.keys.queue, r.hget(q.keys.item_key(a0.task_id), "m")) == 1.0  # may start
    assert q.length() == 2
    assert take(q).task_id == a0.task_id
    assert q.dequeue() is None  # A1 waits for it


def test_a_credit_after_put_back_and_a_new_lease_returns_the_unused_part_once(
    r: redis.Redis,
) -> None:
    """Charged 4 once, run twice for 1 in all: the credit at the end gives 3 back, once (A2
    moves from 8 to 5; A1 is at the clock), and usage remembers 1, not 1 then 4 at the ack."""
    q = FairQueue(r, "jobs", usage_half_life_s=3600)
    a = fill(q, "A", 3, weight=4)
    first = take(q)
    assert q.put_back(first.task_id, first.token)
    second = take(q)
    assert second.task_id == first.task_id
    assert q.credit(second.task_id, second.token, 1) == 3.0
    assert q.credit(second.task_id, second.token, 1) == 0.0
    assert r.zscore(q.keys.queue, r.hget(q.keys.item_key(a[2]), "m")) == 5.0
    assert q.ack(second.task_id, second.token)
    assert float(r.hget(q.keys.usage, "A").split()[0]) == pytest.approx(1, rel=1e-6)


def test_a_credit_before_put_back_is_the_items_only_one(r: redis.Redis) -> None:
    """Credited under its first lease, the item is not credited again under the next, and its
    usage is what that credit said, not its weight on top."""
    q = FairQueue(r, "jobs", usage_half_life_s=3600)
    fill(q, "A", 2, weight=4)
    first = take(q)
    assert q.credit(first.task_id, first.token, 2) == 2.0
    assert q.put_back(first.task_id, first.token)
    second = take(q)
    assert q.credit(second.task_id, second.token, 1) == 0.0
    assert q.ack(second.task_id, second.token)
    assert float(r.hget(q.keys.usage, "A").split()[0]) == pytest.approx(2, rel=1e-6)


def test_a_newcomer_goes_before_it_and_its_partitions_next_item_after(r: redis.Redis) -> None:
    """A0 had its turn at 0 and is charged to 1: put back, it starts at 1 (before B1, which
    arrived before it, at 1 too: the put-back item goes first among equals); C0, a newcomer,
    starts at the clock, before it; A's next item follows it."""
    q = FairQueue(r, "jobs")
    fill(q, "A", 1)
    fill(q, "B", 2)
    lease = take(q)
    assert q.put_back(lease.task_id, lease.token)
    q.enqueue("A", [Item("A1")])
    q.enqueue("C", [Item("C0")])
    assert drain(q) == ["B0", "C0", "A0", "B1", "A1"]


def test_once_the_queue_drained_it_starts_at_the_restarted_clock(r: redis.Redis) -> None:
    """Leasing the last queued item restarted every clock (docs/vtrr.md): the one put back
    then starts at 0, and so does its partition's next item, behind it."""
    q = FairQueue(r, "jobs")
    fill(q, "A", 1)
    lease = take(q)
    assert q.put_back(lease.task_id, lease.token)
    q.enqueue("A", [Item("A1")])
    q.enqueue("B", [Item("B0")])
    assert drain(q) == ["A0", "A1", "B0"]
