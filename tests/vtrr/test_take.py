"""take: lease one named queued item out of turn, when it may start; the others keep their
order, and the queue's clock moves only as far as a dequeue's would have."""

from __future__ import annotations

import redis

from app.vtrr import FairQueue, Item, Limits
from tests.vtrr.helpers import drain, expire, fill
from tests.vtrr.helpers import take as dequeued


def clock(q: FairQueue) -> float:
    return float(q.redis.get(q.keys.current_virtual_time) or 0)


def test_an_item_deep_in_line_is_leased_and_the_others_keep_their_order(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 3)
    b = fill(q, "B", 3)
    assert q.position(b[1]) == 3
    lease = q.take(b[1])
    assert lease is not None
    assert (lease.task_id, lease.payload, lease.timeouts) == (b[1], "B1", 0)
    assert (q.length(), q.pending(), q.queued_weight()) == (5, 1, 5)
    assert q.expiry(b[1]) == lease.expires_at
    assert drain(q) == ["A0", "B0", "A1", "A2", "B2"]
    assert q.ack(lease.task_id, lease.token)
    assert (q.stats()["dequeued"], q.stats()["acked"]) == (6, 6)


def test_the_clock_moves_to_the_first_item_in_line_not_to_the_one_taken(r: redis.Redis) -> None:
    """After A0 the clock is at 0 and A1 (at 1) is first in line: taking A3 moves the clock to
    1, as leasing A1 would have. A newcomer then starts behind A1, not behind A2 (the clock at
    3 would put it there) nor before A1 (the clock left at 0)."""
    q = FairQueue(r, "jobs")
    a = fill(q, "A", 4)
    dequeued(q)
    assert clock(q) == 0
    assert q.take(a[3]) is not None
    assert clock(q) == 1
    q.enqueue("B", [Item("B0")])
    assert drain(q) == ["A1", "B0", "A2"]


def test_the_first_item_in_line_moves_the_clock_as_a_dequeue_does(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    a = fill(q, "A", 3)
    dequeued(q)
    assert q.take(a[1]) is not None
    assert clock(q) == 1


def test_a_leased_item_an_unknown_one_and_one_taken_twice_give_none(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    a = fill(q, "A", 2)
    leased = dequeued(q)
    assert q.take(leased.task_id) is None
    assert q.take("unknown") is None
    assert q.take(a[1]) is not None
    assert q.take(a[1]) is None
    assert (q.length(), q.pending()) == (0, 2)


def test_a_parked_item_is_not_taken(r: redis.Redis) -> None:
    """A may have one item in flight: while A0 runs, A1 is held back and stays where it is."""
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_in_flight=1))
    a = fill(q, "A", 2)
    fill(q, "B", 1)
    a0 = dequeued(q)
    assert q.take(a[1]) is None
    assert (q.position(a[1]), q.length(), q.held_back()) == (1, 2, 1)
    assert q.ack(a0.task_id, a0.token)
    lease = q.take(a[1])
    assert lease is not None
    assert r.hexists(q.keys.live + "A", a[1])  # counted against A's limit
    assert q.dequeue() is not None  # B0
    assert q.dequeue() is None


def test_a_limited_partitions_items_are_taken_in_their_own_order(r: redis.Redis) -> None:
    """With room for two, A's next item may start and A1 waits behind it, parked."""
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_in_flight=2))
    a = fill(q, "A", 2)
    assert q.take(a[1]) is None
    assert q.take(a[0]) is not None
    assert q.take(a[1]) is not None
    assert q.take(a[1]) is None


def test_a_taken_lease_is_a_lease_like_any_other(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs", reclaim_to="front")
    a = fill(q, "A", 2)
    lease = q.take(a[1])
    assert lease is not None
    expire(q, lease)
    assert q.reclaim() == 1
    again = dequeued(q)
    assert (again.task_id, again.timeouts) == (a[1], 1)
    assert not q.ack(lease.task_id, lease.token)
    assert q.ack(again.task_id, again.token)


def test_the_head_is_what_the_next_dequeue_leases(r: redis.Redis) -> None:
    """head() names the first item in line that may start, so that it can be taken by name."""
    q = FairQueue(r, "jobs")
    assert q.head() is None
    q.set_limits("A", Limits(most_in_flight=1))
    a = fill(q, "A", 2)
    b = fill(q, "B", 1)
    assert q.head() == (a[0], "A")
    dequeued(q)
    assert q.head() == (b[0], "B")  # A1 is held back
    lease = q.take(b[0])
    assert lease is not None and q.head() is None
