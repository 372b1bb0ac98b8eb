"""The redq operations on the fair queue: cancel, position, promote, counts, drop."""

from __future__ import annotations

import pytest
import redis
from redis.crc import key_slot

from app.vtrr import DropRefusedError, FairQueue, Item, QueueFullError
from tests.vtrr.helpers import drain, fill, take


def test_position_follows_the_dispatch_order(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    a = fill(q, "A", 3)
    b = fill(q, "B", 2)
    assert [q.position(i) for i in a] == [0, 2, 4]
    assert [q.position(i) for i in b] == [1, 3]
    lease = take(q)
    assert q.position(lease.task_id) is None  # in flight, not queued
    assert q.position("unknown") is None
    assert [q.position(i) for i in b] == [0, 2]


def test_cancel_removes_a_queued_item_only(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    ids = fill(q, "A", 3)
    lease = take(q)
    assert not q.cancel(lease.task_id)  # in flight: cancel is for queued items
    assert q.cancel(ids[1])
    assert not q.cancel(ids[1])
    assert q.length() == 1
    assert q.stats()["cancelled"] == 1
    assert drain(q) == ["A2"]
    assert not r.exists(q.keys.item_key(ids[1]))


def test_cancelling_a_backlog_refunds_its_virtual_time(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "B", 5)
    ids = fill(q, "A", 50)
    for task_id in ids:  # oldest first: only the last cancel finds the partition empty
        assert q.cancel(task_id)
    fill(q, "A", 1)
    # A is not made to wait behind the 50 items it no longer has.
    assert drain(q)[:2] == ["B0", "A0"]


def test_cancelling_the_whole_queue_resets_it(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    ids = fill(q, "A", 3)
    for task_id in ids:
        assert q.cancel(task_id)
    assert sorted(k.decode() for k in r.keys("*")) == [q.keys.seq, q.keys.stats]


def test_promote_moves_an_item_ahead_of_all_others(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 3)
    b = fill(q, "B", 3)
    assert q.promote(b[2])
    assert q.position(b[2]) == 0
    assert not q.promote("unknown")
    assert drain(q) == ["B2", "A0", "B0", "A1", "B1", "A2"]
    assert q.stats()["promoted"] == 1


def test_latest_promotion_goes_first(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    ids = fill(q, "A", 4)
    assert q.promote(ids[2])
    assert q.promote(ids[3])
    assert drain(q) == ["A3", "A2", "A0", "A1"]


def test_length_pending_and_stats_count_the_life_of_items(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    assert (q.length(), q.pending()) == (0, 0)
    fill(q, "A", 4)
    first = take(q)
    take(q)
    assert (q.length(), q.pending()) == (2, 2)
    assert q.ack(first.task_id, first.token)
    assert q.stats() == {
        "enqueued": 4,
        "dequeued": 2,
        "acked": 1,
        "reclaimed": 0,
        "cancelled": 0,
        "released": 0,
        "promoted": 0,
        "credited": 0,
    }


def test_drop_needs_the_queue_name_and_deletes_only_its_keys_but_its_counters(
    r: redis.Redis,
) -> None:
    q = FairQueue(r, "jobs")
    other = FairQueue(r, "other")
    fill(q, "A", 3)
    take(q)
    fill(other, "A", 1)
    r.set("unrelated", "1")
    with pytest.raises(DropRefusedError):
        q.drop("other")
    assert q.length() == 2
    q.drop("jobs")
    assert (q.length(), q.pending()) == (0, 0)
    assert [k for k in r.keys("*") if k.startswith(b"vtrr:{jobs}")] == [q.keys.stats.encode()]
    assert other.length() == 1
    assert r.get("unrelated") == b"1"


def test_front_enqueue_goes_ahead_without_charging_the_partition(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 2)
    q.enqueue("B", [Item("urgent")], front=True)
    fill(q, "B", 1)
    assert drain(q) == ["urgent", "A0", "B0", "A1"]


@pytest.mark.parametrize("weight", [0, -1, 1.5, True, "2", None])
def test_weight_must_be_a_positive_integer(r: redis.Redis, weight: object) -> None:
    q = FairQueue(r, "jobs")
    with pytest.raises(ValueError, match="weight"):
        q.enqueue("A", [Item("x", weight=weight)])  # type: ignore[arg-type]
    assert q.length() == 0


@pytest.mark.parametrize("share", [0, -2, float("nan"), float("inf"), "1"])
def test_share_must_be_a_positive_finite_number(r: redis.Redis, share: object) -> None:
    q = FairQueue(r, "jobs", shares={"A": share})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="share"):
        fill(q, "A", 1)
    assert q.length() == 0


@pytest.mark.parametrize("name", ["", "a{b", "x}"])
def test_queue_name_must_be_usable_as_a_hash_tag(r: redis.Redis, name: str) -> None:
    with pytest.raises(ValueError, match="name"):
        FairQueue(r, name)


def test_every_key_shares_one_cluster_slot(r: redis.Redis) -> None:
    q = FairQueue(r, "files")
    assert q.keys.queue == "vtrr:{files}:queue"
    assert q.keys.inflight == "vtrr:{files}:inflight"
    assert {key_slot(key.encode()) for key in q.keys.all()} == {key_slot(b"files")}


def test_a_partition_may_be_capped_and_a_refused_batch_writes_nothing(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 2)
    with pytest.raises(QueueFullError, match="at most 3"):
        q.enqueue("A", [Item("x"), Item("y")], max_queued=3)
    assert q.length() == 2
    assert q.enqueue("A", [Item("z")], max_queued=3)
    assert q.enqueue("B", [Item("b")], max_queued=1)  # the cap is per partition
    lease = take(q)  # once one leaves the queue there is room again
    assert q.ack(lease.task_id, lease.token)
    assert q.enqueue("A", [Item("w")], max_queued=3)
