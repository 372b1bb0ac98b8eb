"""credit: an item that used less than its weight gives its partition the unused part back."""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis

from app.vtrr import FairQueue, Item
from app.vtrr.aio import AsyncFairQueue
from app.vtrr.wire import CREDIT_MOVES
from tests.vtrr.helpers import drain, expire, fill, take


def score_of(q: FairQueue, task_id: str) -> float:
    """The virtual start time of a queued item."""
    member = q.redis.hget(q.keys.item_key(task_id), "m")
    assert member is not None
    score = q.redis.zscore(q.keys.queue, member)
    assert score is not None
    return score


def vt_of(q: FairQueue, partition: str) -> float | None:
    """A partition's virtual time, or None when it has none."""
    raw = q.redis.hget(q.keys.partition_virtual_time, partition)
    return None if raw is None else float(raw)


def take_token(q: FairQueue, task_id: str) -> str:
    """The current lease token of an item in flight."""
    token = q.redis.hget(q.keys.item_key(task_id), "l")
    assert token is not None
    return token.decode()


def state(q: FairQueue) -> tuple[object, ...]:
    """Everything a credit may change."""
    k = q.keys
    return (
        q.redis.zrange(k.queue, 0, -1, withscores=True),
        q.redis.hgetall(k.partition_virtual_time),
        q.redis.zrange(k.idle_partitions, 0, -1, withscores=True),
        [q.redis.hgetall(key) for key in sorted(q.redis.scan_iter(f"{k.item}*"))],
        q.stats(),
    )


def a_ahead_of_b(r: redis.Redis) -> tuple[FairQueue, list[str]]:
    """A's three items of weight 4 (starts 0, 4, 8) and B's six of weight 1 (0..5), A's first
    item leased: the ids of A's items."""
    q = FairQueue(r, "jobs")
    a = fill(q, "A", 3, weight=4)
    fill(q, "B", 6)
    assert take(q).task_id == a[0]
    return q, a


def test_without_credit_a_waits_behind_b(r: redis.Redis) -> None:
    q, _ = a_ahead_of_b(r)
    assert drain(q) == ["B0", "B1", "B2", "B3", "A1", "B4", "B5", "A2"]


def test_credit_moves_the_partitions_queued_items_ahead_of_others(r: redis.Redis) -> None:
    q, a = a_ahead_of_b(r)
    assert q.position(a[1]) == 4
    # A0 used 1 of its 4: 3 of its cost come back, to its queued items and its clock.
    assert q.credit(a[0], take_token(q, a[0]), 1) == 3.0
    assert (score_of(q, a[1]), score_of(q, a[2]), vt_of(q, "A")) == (1.0, 5.0, 9.0)
    assert q.position(a[1]) == 1
    assert q.stats()["credited"] == 1
    # Ties at the same start still go to the earlier arrival: A1 and A2 came before B1 and B5.
    assert drain(q) == ["B0", "A1", "B1", "B2", "B3", "B4", "A2", "B5"]


def test_a_credit_with_no_items_queued_moves_the_next_enqueue(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    [a0] = fill(q, "A", 1, weight=10)
    fill(q, "B", 3)
    lease = take(q)
    assert r.zscore(q.keys.idle_partitions, "A") == 10.0
    assert q.credit(a0, lease.token, 4) == 6.0
    assert (vt_of(q, "A"), r.zscore(q.keys.idle_partitions, "A")) == (4.0, 4.0)
    [a1] = q.enqueue("A", [Item("A1")])
    assert score_of(q, a1) == 4.0


def test_a_credit_never_moves_anything_behind_the_queues_clock(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    a0, a1 = q.enqueue("A", [Item("A0", weight=10), Item("A1")])  # starts 0 and 10
    fill(q, "B", 4)  # starts 0..3
    lease = take(q)
    for _ in range(3):
        take(q)  # B0, B1, B2: the clock is at 2
    assert q.credit(a0, lease.token, 1) == 9.0
    assert (score_of(q, a1), vt_of(q, "A")) == (2.0, 2.0)  # 10 - 9 and 11 - 9, held at 2
    assert drain(q) == ["A1", "B3"]


def test_only_the_current_lease_holder_may_credit(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs", reclaim_on_dequeue=False)
    a = fill(q, "A", 2, weight=4)
    fill(q, "B", 2)
    lease = take(q)
    before = state(q)
    assert q.credit(lease.task_id, "not-the-token", 1) == 0.0
    assert q.credit(a[1], "", 1) == 0.0  # queued, not in flight
    assert q.credit("unknown", lease.token, 1) == 0.0
    assert state(q) == before
    expire(q, lease)
    assert q.reclaim() == 1
    before = state(q)
    assert q.credit(lease.task_id, lease.token, 1) == 0.0  # reclaimed: the lease is stale
    assert state(q) == before
    again = take(q)
    assert q.ack(again.task_id, again.token)
    assert q.credit(again.task_id, again.token, 1) == 0.0  # acked
    assert q.stats()["credited"] == 0


def test_a_lease_is_credited_once(r: redis.Redis) -> None:
    q, a = a_ahead_of_b(r)
    token = take_token(q, a[0])
    assert q.credit(a[0], token, 1) == 3.0
    after_first = state(q)
    assert q.credit(a[0], token, 1) == 0.0  # a retry after a lost reply
    assert q.credit(a[0], token, 2) == 0.0
    assert state(q) == after_first


def test_an_item_charged_again_may_be_credited_again_and_a_released_one_not(
    r: redis.Redis,
) -> None:
    q = FairQueue(r, "jobs", reclaim_on_dequeue=False)
    [a0] = fill(q, "A", 1, weight=4)
    fill(q, "A", 1)
    lease = take(q)
    assert q.credit(a0, lease.token, 2) == 2.0
    assert q.release(a0, lease.token)  # to the front: not charged again
    lease = take(q)
    assert q.credit(a0, lease.token, 1) == 0.0
    expire(q, lease)
    assert q.reclaim() == 1  # fairly placed again: charged again
    lease = take(q)
    while lease.task_id != a0:
        lease = take(q)
    assert q.credit(a0, lease.token, 1) == 3.0
    assert q.stats()["credited"] == 2


def test_used_weight_is_checked_like_a_weight_and_all_of_it_used_credits_nothing(
    r: redis.Redis,
) -> None:
    q, a = a_ahead_of_b(r)
    token = take_token(q, a[0])
    for bad in (0, -1, 1.5, True, "1", None):
        with pytest.raises(ValueError, match="weight must be a positive integer"):
            q.credit(a[0], token, bad)  # type: ignore[arg-type]
    before = state(q)
    assert q.credit(a[0], token, 4) == 0.0
    assert state(q) == before
    assert q.credit(a[0], token, 3) == 1.0  # nothing was recorded: it may still be credited


def test_a_use_beyond_the_weight_charges_the_partition_once(r: redis.Redis) -> None:
    """An item that ran on a dearer consumer than it was charged for used more than its
    weight: its partition's queued items and its virtual time move back by the difference, so
    its backlog and its next item pay it; a retry charges nothing more."""
    q, a = a_ahead_of_b(r)
    token = take_token(q, a[0])
    queued_before = {task_id: score_of(q, task_id) for task_id in a[1:]}
    pvt_before = float(r.hget(q.keys.partition_virtual_time, "A") or 0)
    assert q.credit(a[0], token, 6) == -2.0
    assert q.credit(a[0], token, 6) == 0.0
    assert float(r.hget(q.keys.partition_virtual_time, "A") or 0) == pvt_before + 2
    assert {task_id: score_of(q, task_id) for task_id in a[1:]} == {
        task_id: score + 2 for task_id, score in queued_before.items()
    }


def test_front_placed_items_keep_their_place(r: redis.Redis) -> None:
    q, a = a_ahead_of_b(r)
    assert q.promote(a[2])
    assert q.credit(a[0], take_token(q, a[0]), 1) == 3.0
    assert (score_of(q, a[1]), score_of(q, a[2])) == (1.0, 0.0)
    assert q.position(a[2]) == 0


def test_a_credit_moves_at_most_credit_moves_items_and_then_keeps_the_clock(
    r: redis.Redis,
) -> None:
    q = FairQueue(r, "jobs")
    [big] = fill(q, "A", 1, weight=10)
    many = CREDIT_MOVES + 44
    small = fill(q, "A", many)  # starts 10 .. 10 + many - 1
    lease = take(q)
    assert q.credit(big, lease.token, 5) == 5.0
    scores = [score for _, score in r.zrange(q.keys.queue, 0, -1, withscores=True)]
    moved = [float(5 + i) for i in range(CREDIT_MOVES)]
    kept = [float(10 + i) for i in range(CREDIT_MOVES, many)]
    assert scores == moved + kept
    assert vt_of(q, "A") == 10.0 + many  # later items must still follow the ones not moved
    assert q.position(small[0]) == 0


def test_items_of_a_partition_whose_name_extends_anothers_are_not_moved(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    [a0, a1] = q.enqueue("a", [Item("a0", weight=4), Item("a1")])
    [other] = q.enqueue("a:1", [Item("other", weight=4)])
    [another] = q.enqueue("1:a", [Item("another", weight=4)])
    lease = take(q)
    assert lease.task_id == a0
    assert q.credit(a0, lease.token, 2) == 2.0
    assert (score_of(q, a1), score_of(q, other), score_of(q, another)) == (2.0, 0.0, 0.0)


def test_items_queued_before_the_index_are_skipped(r: redis.Redis) -> None:
    q, a = a_ahead_of_b(r)
    r.delete(q.keys.partition_items)  # as if queued by an older version
    assert q.credit(a[0], take_token(q, a[0]), 1) == 3.0
    # Nothing of A can be found, so nothing moves, and its clock stays behind its items.
    assert (score_of(q, a[1]), score_of(q, a[2]), vt_of(q, "A")) == (4.0, 8.0, 12.0)
    assert q.cancel(a[2])
    assert drain(q) == ["B0", "B1", "B2", "B3", "A1", "B4", "B5"]
    assert not r.exists(q.keys.partition_items)


def test_the_asyncio_twin_credits_alike(r: redis.Redis, redis_url: str) -> None:
    q, a = a_ahead_of_b(r)
    token = take_token(q, a[0])

    async def credit() -> list[float]:
        client = AsyncRedis.from_url(redis_url)
        try:
            aq = AsyncFairQueue(client, "jobs")
            stale = await aq.credit(a[0], "stale", 1)
            first = await aq.credit(a[0], token, 1)
            return [stale, first, await aq.credit(a[0], token, 1)]
        finally:
            await client.aclose()

    assert asyncio.run(credit()) == [0.0, 3.0, 0.0]
    assert q.position(a[1]) == 1
