"""reshare: a partition's share changes and its queued items are charged again at once, on both
engines (functions on Redis 7, scripts on 6.2); the hypothesis model test drives it too."""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis

from app.vtrr import FairQueue, Item
from app.vtrr.aio import AsyncFairQueue
from tests.vtrr.helpers import drain, fill, take


def shared(client: redis.Redis, name: str, shares: dict[str, float]) -> FairQueue:
    """A queue whose shares are this dict: a change to it is a change for later enqueues."""
    client.flushdb()
    return FairQueue(client, name, shares=shares)


def served(q: FairQueue, n: int) -> list[str]:
    """Dequeue and ack n items; their payloads."""
    out = []
    for _ in range(n):
        lease = take(q)
        assert q.ack(lease.task_id, lease.token)
        out.append(lease.payload)
    return out


def score_of(q: FairQueue, task_id: str) -> float | None:
    """An item's start time while queued (None when it is not)."""
    member = q.redis.hget(q.keys.item_key(task_id), "m")
    return None if member is None else q.redis.zscore(q.keys.queue, member)


def cost_of(q: FairQueue, task_id: str) -> float:
    """What the item was charged (its hash's c)."""
    return float(q.redis.hget(q.keys.item_key(task_id), "c") or "nan")


def vt_of(q: FairQueue, partition: str) -> float | None:
    raw = q.redis.hget(q.keys.partition_virtual_time, partition)
    return None if raw is None else float(raw)


def snapshot(q: FairQueue) -> dict[str, object]:
    """Every key of the queue with what it holds, to show that a call changed nothing."""
    state: dict[str, object] = {}
    for key in sorted(q.redis.keys("*")):
        kind = q.redis.type(key)
        if kind == "zset":
            state[key] = q.redis.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            state[key] = q.redis.hgetall(key)
        else:
            state[key] = q.redis.get(key)
    return state


def test_a_doubled_share_mid_backlog_takes_two_turns_to_the_others_one(
    engine: tuple[str, redis.Redis],
) -> None:
    name, client = engine
    shares = {"ann": 1.0, "bob": 1.0}
    q = shared(client, f"double-{name}", shares)
    fill(q, "ann", 6)
    bob = fill(q, "bob", 6)
    assert served(q, 4) == ["ann0", "bob0", "ann1", "bob1"]  # the clock at 1
    shares["bob"] = 2.0
    assert q.reshare("bob", 2.0) == 4
    # bob2 keeps its start (2); bob3..5 at 2.5, 3, 3.5; ann's at 2, 3, 4, 5; ties by arrival
    assert [score_of(q, t) for t in bob[2:]] == [2.0, 2.5, 3.0, 3.5]
    assert vt_of(q, "bob") == 4.0
    fill(q, "bob", 1)  # "bob0" again, charged at the new share from where bob5 ends
    assert drain(q) == ["ann2", "bob2", "bob3", "ann3", "bob4", "bob5", "ann4", "bob0", "ann5"]


def test_a_halved_share_mid_backlog_sends_its_items_back_and_others_do_not_move(
    engine: tuple[str, redis.Redis],
) -> None:
    name, client = engine
    shares: dict[str, float] = {}
    q = shared(client, f"half-{name}", shares)
    ann, bob, cat = fill(q, "ann", 4), fill(q, "bob", 4), fill(q, "cat", 4)
    assert served(q, 3) == ["ann0", "bob0", "cat0"]
    others = {t: score_of(q, t) for t in ann + cat}
    assert q.reshare("bob", 0.5) == 3  # bob1..3 at 1, 3, 5
    assert [score_of(q, t) for t in bob[1:]] == [1.0, 3.0, 5.0]
    assert {t: score_of(q, t) for t in ann + cat} == others
    assert drain(q) == ["ann1", "bob1", "cat1", "ann2", "cat2", "ann3", "bob2", "cat3", "bob3"]


def test_starts_follow_the_weights_ahead_at_the_new_share(
    engine: tuple[str, redis.Redis],
) -> None:
    name, client = engine
    q = shared(client, f"weights-{name}", {})
    ids = q.enqueue("ann", [Item(f"a{i}", weight=w) for i, w in enumerate((3, 1, 2, 5))])
    assert q.reshare("ann", 4.0) == 4
    assert [score_of(q, t) for t in ids] == [0.0, 0.75, 1.0, 1.5]
    assert [cost_of(q, t) for t in ids] == [0.75, 0.25, 0.5, 1.25]
    assert vt_of(q, "ann") == 2.75


def test_items_in_flight_keep_their_charge_and_are_credited_from_it(
    engine: tuple[str, redis.Redis],
) -> None:
    name, client = engine
    shares = {"ann": 1.0}
    q = shared(client, f"flight-{name}", shares)
    q.enqueue("ann", [Item(f"a{i}", id=f"a{i}", weight=2) for i in range(3)])
    running = take(q)  # a0, charged 2 at the old share
    expiry = q.expiry("a0")
    shares["ann"] = 4.0
    assert q.reshare("ann", 4.0) == 2  # a1 and a2 only
    assert (cost_of(q, "a0"), q.expiry("a0"), score_of(q, "a0")) == (2.0, expiry, None)
    assert q.credit(running.task_id, running.token, 1) == 1.0  # half of its old cost


def test_an_item_leased_after_a_reshare_is_credited_from_its_new_cost(
    engine: tuple[str, redis.Redis],
) -> None:
    name, client = engine
    shares = {"ann": 1.0}
    q = shared(client, f"credit-{name}", shares)
    q.enqueue("ann", [Item(f"a{i}", id=f"a{i}", weight=4) for i in range(3)])
    shares["ann"] = 2.0
    q.reshare("ann", 2.0)  # a0..a2 at 0, 2, 4, each charged 2
    lease = take(q)
    assert q.credit(lease.task_id, lease.token, 1) == 1.5  # 2 x (4 - 1) / 4
    # a1 and a2 (and the clock) move back by it, not below the queue's clock (0)
    assert (score_of(q, "a1"), score_of(q, "a2"), vt_of(q, "ann")) == (0.5, 2.5, 4.5)


def test_promoted_items_keep_their_place_at_the_front(engine: tuple[str, redis.Redis]) -> None:
    name, client = engine
    q = shared(client, f"front-{name}", {})
    fill(q, "bob", 2)
    ann = fill(q, "ann", 3, weight=2)
    assert q.promote(ann[2])
    kept = (q.redis.hget(q.keys.item_key(ann[2]), "m"), score_of(q, ann[2]), cost_of(q, ann[2]))
    assert q.reshare("ann", 2.0) == 2
    after = (q.redis.hget(q.keys.item_key(ann[2]), "m"), score_of(q, ann[2]), cost_of(q, ann[2]))
    assert after == kept
    assert (score_of(q, ann[1]), vt_of(q, "ann")) == (1.0, 2.0)
    assert drain(q) == ["ann2", "bob0", "ann0", "bob1", "ann1"]


def test_items_queued_before_the_index_keep_the_partition_clock(r: redis.Redis) -> None:
    q = FairQueue(r, "legacy")
    old = fill(q, "ann", 2)
    r.delete(q.keys.partition_items)  # as if queued by an older version
    new = fill(q, "ann", 2)  # indexed: at 2 and 3
    assert q.reshare("ann", 2.0) == 2  # only what the index finds: 2 and 2.5
    assert [score_of(q, t) for t in old + new] == [0.0, 1.0, 2.0, 2.5]
    assert vt_of(q, "ann") == 4.0  # not 3: the clock stays while some are not indexed


def test_an_account_with_nothing_queued_changes_nothing(engine: tuple[str, redis.Redis]) -> None:
    name, client = engine
    q = shared(client, f"none-{name}", {})
    fill(q, "ann", 2)
    fill(q, "cat", 1)
    take(q)  # ann0
    take(q)  # cat0: cat has nothing queued, but owes for it (its clock at 1)
    before = snapshot(q)
    assert q.reshare("bob", 3.0) == 0  # never seen
    assert q.reshare("cat", 3.0) == 0  # only in flight
    assert snapshot(q) == before


def test_a_bad_share_is_refused_and_changes_nothing(engine: tuple[str, redis.Redis]) -> None:
    name, client = engine
    q = shared(client, f"bad-{name}", {})
    fill(q, "ann", 3)
    before = snapshot(q)
    for bad in (0.0, -1.0, float("inf"), float("-inf"), float("nan"), True):
        with pytest.raises(ValueError, match="share of 'ann' must be"):
            q.reshare("ann", bad)
    assert snapshot(q) == before


def test_the_asyncio_queue_reshares_as_the_blocking_one(redis_url: str, r: redis.Redis) -> None:
    async def scenario() -> list[str]:
        client = AsyncRedis.from_url(redis_url)
        try:
            shares = {"ann": 1.0, "bob": 1.0}
            q = FairQueue(r, "aio", shares=shares)
            fill(q, "ann", 3)
            fill(q, "bob", 3)
            with pytest.raises(ValueError, match="must be positive"):
                await AsyncFairQueue(client, "aio").reshare("bob", 0.0)
            assert await AsyncFairQueue(client, "aio").reshare("bob", 3.0) == 3
            return drain(q)
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == ["ann0", "bob0", "bob1", "bob2", "ann1", "ann2"]
