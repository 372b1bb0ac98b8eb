"""Per-partition limits: most items in flight, and most weight held by the items in flight."""

from __future__ import annotations

import threading

import pytest
import redis

from app.vtrr import FairQueue, Item, Lease, Limits, OverLimitError, Woken, wake_together
from tests.support import wait_for
from tests.vtrr.helpers import drain, expire, fill, take


def served(q: FairQueue) -> list[str]:
    """Dequeue (without acking) until nothing may start; the payloads, in order."""
    leases: list[Lease] = []
    while (lease := q.dequeue()) is not None:
        leases.append(lease)
    return [lease.payload for lease in leases]


#: What two readings of Redis's clock (whole microseconds, as float seconds) may be off by.
SLACK_S = 1e-5


def redis_now(r: redis.Redis) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6


def leased(r: redis.Redis, q: FairQueue) -> tuple[Lease, float, float]:
    """take(q), and Redis's time just before and just after it: the lease began between them."""
    before = redis_now(r)
    lease = take(q)
    return lease, before, redis_now(r)


def check_wake(woken: Woken, early: float, late: float) -> None:
    """A wake is right about an item that may start from a moment between early and late:
    before that moment it says when the wait ends, from then on it lets the item start. Which
    of the two a test sees depends on how fast the machine ran it (on a busy one, the tens of
    milliseconds of a wait may be over by the wake), so either is judged by Redis's clock."""
    if woken.woken:
        assert woken.now >= early - SLACK_S, "let start before the weight ahead had run down"
    else:
        assert woken.next_at is not None and early - SLACK_S <= woken.next_at <= late + SLACK_S
        assert woken.now < woken.next_at, "still waiting once its wait was over"


def test_a_partition_at_its_most_in_flight_waits_and_the_others_take_the_consumers(
    r: redis.Redis,
) -> None:
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_in_flight=2))
    a = fill(q, "A", 5)
    fill(q, "B", 2)
    assert served(q) == ["A0", "B0", "A1", "B1"]  # fair order, until A holds 2
    assert q.length() == 3  # A's three still count as queued
    assert q.held_back() == 3
    assert r.zcard(q.keys.queue) == 0  # but none of them may start: nothing for triggers
    assert q.positions(a[2:]) == [0, 1, 2]
    assert q.ack(a[0], r.hget(q.keys.item_key(a[0]), "l").decode())
    assert q.held_back() == 0  # A may start its next one now
    assert take(q).payload == "A2"  # the freed slot goes to A's next, in its place
    assert q.dequeue() is None


def test_a_limited_partition_keeps_its_place_in_the_fair_order(r: redis.Redis) -> None:
    """A's held-back items wait below the clock; once A may start one, it goes first."""
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_in_flight=1))
    fill(q, "A", 3)
    fill(q, "B", 6)
    first = take(q)
    assert first.payload == "A0"
    assert [take(q).payload for _ in range(3)] == ["B0", "B1", "B2"]
    assert q.ack(first.task_id, first.token)
    assert take(q).payload == "A1"  # ahead of B3: A was owed its turns


def test_the_count_in_flight_is_never_passed_under_concurrent_consumers(r: redis.Redis) -> None:
    """The queue's own bookkeeping, read at every lease: never more than the limit in flight."""
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_in_flight=3))
    fill(q, "A", 60)
    seen: list[int] = []

    def consume() -> None:
        mine = FairQueue(redis.Redis(connection_pool=r.connection_pool), "jobs")
        while (lease := mine.dequeue()) is not None or q.length():
            if lease is None:
                continue
            seen.append(int(r.hlen(q.keys.live + "A")))
            assert mine.ack(lease.task_id, lease.token)

    threads = [threading.Thread(target=consume) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 60 and max(seen) <= 3


def test_held_weight_runs_down_and_the_next_item_starts_when_there_is_room(
    r: redis.Redis,
) -> None:
    """Most held 3, items of 2 that use 20 a second (0.1 s each): the second may start once the
    first holds 1 or less, 50 ms after it began, not only when it ends."""
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_held=3, weight_per_second=20))
    fill(q, "A", 2, weight=2)
    first, before, after = leased(r, q)
    early, late = before + 0.05, after + 0.05  # when the second may start
    second = q.dequeue()
    assert second is None or redis_now(r) >= early - SLACK_S  # not before the first ran down
    if second is None:
        check_wake(q.wake(), early, late)
        second = wait_for(q.dequeue, timeout=10, what="the second item may start")
    assert second.payload == "A1"
    assert redis_now(r) >= early - SLACK_S  # not before the first had run down
    assert q.ack(first.task_id, first.token)


def test_a_wake_lets_a_partition_start_while_other_work_is_queued(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_held=3, weight_per_second=50))
    fill(q, "A", 2, weight=2)
    _, before, after = leased(r, q)
    fill(q, "B", 3)
    assert r.zcard(q.keys.queue) == 3  # B's: A's second waits for a wake, whatever the time
    check_wake(q.wake(), before + 0.02, after + 0.02)  # A's second may start 20 ms after A0
    wait_for(lambda: r.zcard(q.keys.queue) == 4 or q.wake().woken, timeout=10)
    assert r.zcard(q.keys.queue) == 4
    assert q.wake().next_at is None  # nobody waits for time any more


def test_an_item_heavier_than_the_most_held_is_refused_whole(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_held=5))
    with pytest.raises(OverLimitError) as refused:
        q.enqueue("A", [Item("light", weight=1), Item("heavy", weight=6)])
    assert refused.value.limit == 5
    assert q.length() == 0 and q.stats()["enqueued"] == 0
    assert q.enqueue("B", [Item("other", weight=6)])  # another partition has no such limit


def test_limits_set_on_a_queued_partition_hold_it_back_at_once_and_clearing_lets_it_go(
    r: redis.Redis,
) -> None:
    q = FairQueue(r, "jobs")
    a = fill(q, "A", 4)
    running = take(q)  # A0, in flight before the limit
    q.set_limits("A", Limits(most_in_flight=1))
    assert q.limits("A") == Limits(most_in_flight=1)
    assert q.dequeue() is None  # A0 counts
    assert q.length() == 3 and q.positions(a[1:]) == [0, 1, 2]
    q.set_limits("A", Limits())
    assert q.limits("A") == Limits()
    assert r.zcard(q.keys.queue) == 3 and not r.exists(q.keys.parked)
    assert served(q) == ["A1", "A2", "A3"]
    assert q.ack(running.task_id, running.token)


def test_cancel_promote_and_drop_reach_held_back_items(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_in_flight=1))
    a = fill(q, "A", 4)
    b = fill(q, "B", 2)
    held = take(q)  # A0
    assert q.cancel(a[2])  # parked
    assert q.promote(a[3])  # parked: to the front of A's own items
    assert q.position(a[3]) == 0
    assert q.ack(held.task_id, held.token)
    assert take(q).payload == "A3"
    assert q.position(a[1]) == 1  # behind B0; ahead of B1, queued later at the same time
    dropped = q.drop("jobs")
    assert set(dropped.queued) == {a[1], *b}
    assert q.limits("A") == Limits(most_in_flight=1)  # a setting, not state
    assert q.length() == 0
    assert {k.decode() for k in r.keys("vtrr:{jobs}:*")} <= {
        q.keys.stats,
        q.keys.limits,
        q.keys.freed,
    }


def test_a_reclaimed_lease_frees_its_partitions_slot(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_in_flight=1))
    fill(q, "A", 2)
    lost = take(q)
    assert q.dequeue() is None
    expire(q, lost)
    after = take(q)  # the reclaim puts A0 back behind A1 (fairly), and frees A's one slot
    assert after.payload == "A1"
    assert q.dequeue() is None
    assert q.ack(after.task_id, after.token)
    again = take(q)
    assert again.task_id == lost.task_id and again.timeouts == 1
    assert q.ack(again.task_id, again.token)
    assert q.length() == 0


def test_nothing_is_left_behind_once_a_limited_partition_is_done(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_in_flight=2, most_held=10))
    fill(q, "A", 5, weight=3)
    assert drain(q) == ["A0", "A1", "A2", "A3", "A4"]
    q.wake()  # what its acks freed, for a group's other queues
    left = {k.decode() for k in r.keys("vtrr:{jobs}:*")}
    assert left == {q.keys.stats, q.keys.limits, q.keys.seq}


def test_limits_refuse_nonsense_before_redis_is_touched() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="most_in_flight"):
            Limits(most_in_flight=bad)  # type: ignore[arg-type]
    for held in (0, -2.0, float("inf")):
        with pytest.raises(ValueError, match="most_held"):
            Limits(most_held=held)
    with pytest.raises(ValueError, match="weight_per_second"):
        Limits(most_held=1, weight_per_second=-1)


def test_a_limits_group_counts_a_partitions_items_in_flight_over_its_queues(
    r: redis.Redis,
) -> None:
    """short and long count A's items together: with one in flight in short, long's next item
    of A waits, though it was let into long's queue before; when short's ends, a wake of the
    group lets it start."""
    short = FairQueue(r, "short", limits_group="accounts")
    long = FairQueue(r, "long", limits_group="accounts")
    for q in (short, long):
        q.set_limits("A", Limits(most_in_flight=1))
    fill(short, "A", 1)
    fill(long, "A", 1)
    fill(long, "B", 1)
    assert r.zcard(long.keys.queue) == 2  # A's may start there, as far as long knows
    running = take(short)
    assert take(long).payload == "B0"  # A's is parked again at its lease, B's goes instead
    assert long.dequeue() is None
    assert short.ack(running.task_id, running.token)
    assert long.dequeue() is None  # long has not heard yet
    woken = wake_together([short, long])
    assert woken.woken >= 1 and woken.next_at is None
    assert take(long).payload == "A0"
    assert short.dequeue() is None and long.dequeue() is None


def test_a_groups_held_weight_runs_down_over_its_queues(r: redis.Redis) -> None:
    short = FairQueue(r, "short", limits_group="accounts")
    long = FairQueue(r, "long", limits_group="accounts")
    for q in (short, long):
        q.set_limits("A", Limits(most_held=3, weight_per_second=40))
    fill(short, "A", 1, weight=2)
    fill(long, "A", 1, weight=2)
    first, before, after = leased(r, short)
    early, late = before + 0.025, after + 0.025  # held 2 + 2 > 3 until short's has run 25 ms
    second = long.dequeue()
    assert second is None or redis_now(r) >= early - SLACK_S
    if second is None:
        check_wake(wake_together([short, long]), early, late)
        second = wait_for(long.dequeue, timeout=10, what="long's item of A may start")
    assert second.payload == "A0" and redis_now(r) >= early - SLACK_S
    assert short.ack(first.task_id, first.token)


def test_an_item_that_began_late_holds_its_weight_from_then(r: redis.Redis) -> None:
    """Most held 3, items of 2 that use 20 a second: the second may start once the first holds
    1 or less, 50 ms after the first *began*. A run that began 0.2 s after its lease (its worker
    waited for a fresh process) used nothing of its weight meanwhile."""
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_held=3, weight_per_second=20))
    fill(q, "A", 2, weight=2)
    first, _, leased_at = leased(r, q)
    wait_for(lambda: redis_now(r) > leased_at + 0.2, timeout=10, what="the wait before its run")
    before = redis_now(r)
    assert q.began(first.task_id, first.token)
    early = before + 0.05  # from its run's start, not its lease's (long past)
    second = q.dequeue()
    assert second is None or redis_now(r) >= early - SLACK_S  # not before the first ran down
    if second is None:
        q.wake()
        second = wait_for(q.dequeue, timeout=10, what="the second item may start")
    assert (second.payload, redis_now(r) >= early - SLACK_S) == ("A1", True)
    assert not q.began(first.task_id, "stale-token")
    assert q.ack(first.task_id, first.token)
