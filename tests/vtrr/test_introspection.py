"""What operators read off a queue: the fairness lag, the busiest partitions, what drop took."""

from __future__ import annotations

import pytest
import redis

from app.vtrr import FairQueue
from tests.vtrr.helpers import fill, take


def test_an_empty_queue_has_no_lag(r: redis.Redis) -> None:
    assert FairQueue(r, "jobs").fairness_lag() == 0


@pytest.mark.parametrize("share_of_a", [1, 2, 5])
def test_the_lag_is_how_far_ahead_the_most_served_partition_is_in_weight_units(
    r: redis.Redis, share_of_a: float
) -> None:
    q = FairQueue(r, "jobs", shares={"A": share_of_a})
    fill(q, "A", 2, weight=10)  # virtual starts 0 and 10 / share
    fill(q, "B", 2, weight=1)  # virtual starts 0 and 1
    assert q.fairness_lag() == 0  # both next items start at the clock

    assert take(q).payload == "A0"
    # A's next item starts 10 weight units (10 / share virtual time, times its share) ahead
    assert q.fairness_lag() == pytest.approx(10)
    assert take(q).payload == "B0"
    assert take(q).payload == "B1"  # the clock moves to B1's start, 1
    assert q.fairness_lag() == pytest.approx((10 / share_of_a - 1) * share_of_a)


def test_a_window_of_one_item_reads_the_lag_of_the_next_partition_in_line(
    r: redis.Redis,
) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 5, weight=1)  # starts 0..4
    fill(q, "B", 1, weight=1)  # start 0, second in fair order
    take(q)
    take(q)  # the clock is at 0; A's next start is 1
    assert q.fairness_lag(window=1) == pytest.approx(1)
    assert q.fairness_lag() == pytest.approx(1)


def test_top_partitions_lists_the_most_queued_first(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 3)
    fill(q, "B", 1)
    fill(q, "C", 2)
    assert q.top_partitions() == [("A", 3), ("C", 2), ("B", 1)]
    assert q.top_partitions(2) == [("A", 3), ("C", 2)]
    take(q)  # A's first item leaves the queue
    assert q.top_partitions(1) in ([("A", 2)], [("C", 2)])


def test_drop_returns_the_ids_it_held_queued_and_in_flight(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    ids = fill(q, "A", 3)
    lease = take(q)

    dropped = q.drop("jobs")

    assert sorted(dropped.queued) == sorted(set(ids) - {lease.task_id})
    assert dropped.in_flight == [lease.task_id]
    assert q.length() == q.pending() == 0


def test_positions_reads_many_places_in_one_call(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    a = fill(q, "A", 2)
    b = fill(q, "B", 2)
    lease = take(q)

    assert q.positions([*a, *b, "unknown"]) == [None, 1, 0, 2, None]
    assert lease.task_id == a[0]  # in flight: not queued, so no place
    assert q.positions([]) == []
