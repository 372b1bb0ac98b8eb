"""Fair share with memory: a partition's usage decays with a half-life, and one that comes back
starts behind the clock by what it used lately, over its share."""

from __future__ import annotations

import pytest
import redis

from app.vtrr import FairQueue, Item
from tests.vtrr.helpers import drain, fill, take

HOUR = 3600.0


def used(q: FairQueue, partition: str) -> float:
    """The partition's usage as last written."""
    return remembered(q, partition)[0]


def remembered(q: FairQueue, partition: str) -> tuple[float, int]:
    """The partition's usage as last written, and when (Redis's clock, microseconds)."""
    raw = q.redis.hget(q.keys.usage, partition)
    if raw is None:
        return 0.0, 0
    value, at = raw.split()
    return float(value), int(at)


def decayed(value: float, since_us: int, until_us: int, half_life_s: float) -> float:
    """What `value` written at since_us counts at until_us."""
    return value * 2 ** (-(until_us - since_us) / 1e6 / half_life_s)


def redis_us(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1_000_000 + int(micros)


def order(q: FairQueue) -> list[str]:
    return drain(q)


def test_without_memory_a_partition_that_comes_back_starts_at_the_clock(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 5, weight=2)
    drain(q)
    fill(q, "A", 2)
    fill(q, "B", 2)
    assert order(q) == ["A0", "B0", "A1", "B1"]


def test_a_partition_that_used_more_lets_the_other_have_that_much_first(r: redis.Redis) -> None:
    """A used 10 within the half-life, B nothing: back together, B has 10 of service first."""
    q = FairQueue(r, "jobs", usage_half_life_s=HOUR)
    fill(q, "A", 5, weight=2)
    before = redis_us(r)
    assert drain(q) == [f"A{i}" for i in range(5)]
    # 2 at each ack, the earlier ones decayed by the time of the last: between 10 decayed over
    # the whole drain and 10 (on a busy machine the drain takes long enough to tell).
    value, at = remembered(q, "A")
    assert decayed(10, before, at, HOUR) - 1e-9 <= value <= 10 + 1e-9
    fill(q, "A", 3)
    fill(q, "B", 12)
    served = order(q)
    assert served[:10] == [f"B{i}" for i in range(10)]
    assert served[10:] == ["A0", "B10", "A1", "B11", "A2"]


def test_usage_is_over_the_share_and_decays_by_half_each_half_life(r: redis.Redis) -> None:
    """Usage written a half-life ago counts half; a share of 2 halves it again."""
    q = FairQueue(r, "jobs", shares={"A": 2.0}, usage_half_life_s=100)
    r.hset(q.keys.usage, "A", f"20 {redis_us(r) - 100_000_000}")  # 20, a half-life ago
    a = fill(q, "A", 1, weight=2)  # comes back 20 x 1/2 / 2 = 5 behind the clock
    fill(q, "B", 8)
    assert q.position(a[0]) == 5


def test_a_credit_remembers_what_the_item_used_not_its_weight(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs", usage_half_life_s=HOUR)
    fill(q, "A", 1, weight=10)
    fill(q, "A", 1, weight=10)  # queued, so that the credit moves something
    lease = take(q)
    assert q.credit(lease.task_id, lease.token, 4) > 0
    assert q.ack(lease.task_id, lease.token)
    first, first_at = remembered(q, "A")
    assert first == pytest.approx(4, rel=1e-9)
    other = take(q)
    assert q.ack(other.task_id, other.token)  # no credit: its whole weight
    # The 4 has decayed from its ack to this one: by 4e-5 when 50 ms passed between them, as
    # on a busy machine, so the sum is compared with what Redis's clock says it must be.
    second, second_at = remembered(q, "A")
    assert second == pytest.approx(decayed(first, first_at, second_at, HOUR) + 10, rel=1e-9)


def test_usage_not_changed_for_thirty_half_lives_is_forgotten(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs", usage_half_life_s=1)
    r.hset(q.keys.usage, "old", f"1000 {redis_us(r) - 31_000_000}")
    r.zadd(q.keys.usage_at, {"old": redis_us(r) - 31_000_000})
    fill(q, "A", 1)
    drain(q)  # A's ack writes its usage, and forgets what is that old
    assert r.hget(q.keys.usage, "old") is None and r.zscore(q.keys.usage_at, "old") is None
    assert used(q, "A") > 0


def test_a_group_remembers_usage_over_its_queues(r: redis.Redis) -> None:
    short = FairQueue(r, "short", limits_group="accounts", usage_half_life_s=HOUR)
    long = FairQueue(r, "long", limits_group="accounts", usage_half_life_s=HOUR)
    fill(short, "A", 3, weight=2)
    drain(short)
    a = long.enqueue("A", [Item("A0")])
    fill(long, "B", 8)
    assert long.position(a[0]) == 6  # behind B's first six: A used 6 in short


def test_a_half_life_must_be_positive_and_finite(r: redis.Redis) -> None:
    for bad in (0, -1, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="usage_half_life_s"):
            FairQueue(r, "jobs", usage_half_life_s=bad)
