"""Leases: fenced acks, renewal, expiry and reclaim, and surviving a Redis restart."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from app.dev.redis_server import RedisServer
from app.vtrr import FairQueue, Item
from tests.vtrr.helpers import drain, expire, fill, take


def test_ack_with_the_current_token_finishes_the_item(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 1)
    lease = take(q)
    assert q.pending() == 1
    assert q.ack(lease.task_id, lease.token)
    assert q.pending() == 0
    assert q.length() == 0
    assert not q.ack(lease.task_id, lease.token)  # a second ack finds nothing
    assert sorted(k.decode() for k in r.keys("*")) == [q.keys.seq, q.keys.stats]


def test_dequeue_leases_with_an_expiry_from_redis_time(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs", lease_seconds=30)
    fill(q, "A", 1)
    seconds, micros = r.time()
    lease = take(q)
    assert lease.timeouts == 0
    assert lease.expires_at == pytest.approx(seconds + micros / 1e6 + 30, abs=2)
    assert q.expiry(lease.task_id) == pytest.approx(lease.expires_at)


def test_stale_token_can_neither_ack_nor_extend(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 1)
    first = take(q)
    expire(q, first)
    second = take(q)  # reclaimed and leased again, under a new token
    assert second.task_id == first.task_id
    assert second.token != first.token
    assert not q.ack(first.task_id, first.token)
    assert not q.extend(first.task_id, first.token)
    assert not q.release(first.task_id, first.token)
    assert q.pending() == 1
    assert q.ack(second.task_id, second.token)


def test_unknown_item_cannot_be_acked_or_extended(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    assert not q.ack("nope", "token")
    assert not q.extend("nope", "token")


def test_extend_pushes_the_expiry_forward(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs", lease_seconds=5)
    fill(q, "A", 1)
    lease = take(q)
    assert q.extend(lease.task_id, lease.token, 600)
    expiry = q.expiry(lease.task_id)
    assert expiry is not None and expiry > lease.expires_at + 500
    assert q.reclaim() == 0


def test_extend_refuses_a_non_positive_duration(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 1)
    lease = take(q)
    with pytest.raises(ValueError, match="positive"):
        q.extend(lease.task_id, lease.token, 0)


def test_expired_lease_is_reclaimed_with_its_timeouts_count_raised(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 1)
    lease = take(q)
    expire(q, lease)
    assert q.reclaim() == 1
    assert q.pending() == 0
    assert q.length() == 1
    again = take(q)
    assert (again.task_id, again.payload, again.timeouts) == (lease.task_id, "A0", 1)
    expire(q, again)
    third = take(q)  # dequeue reclaims by itself too
    assert third.timeouts == 2
    assert q.ack(third.task_id, third.token)
    assert q.stats()["reclaimed"] == 2


def test_reclaimed_item_is_rescored_as_if_freshly_enqueued(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 3)
    fill(q, "B", 3)
    a0 = take(q)
    expire(q, a0)
    # A's clock already stands at 3, so the reclaimed A0 queues behind A2.
    assert drain(q) == ["B0", "A1", "B1", "A2", "B2", "A0"]


def test_reclaimed_to_its_partition_s_front_it_leaves_before_its_partition_s_items(
    r: redis.Redis,
) -> None:
    """A lost run's item had had its turn: reclaimed to its partition's front (as put_back
    places it), it goes before A1 and after B0, which was ahead of A1, and A is charged
    nothing more."""
    q = FairQueue(r, "jobs", reclaim_to="partition_front")
    fill(q, "A", 3)
    fill(q, "B", 3)
    a0 = take(q)
    expire(q, a0)
    assert q.reclaim() == 1
    assert float(r.hget(q.keys.partition_virtual_time, "A")) == 3.0
    assert drain(q) == ["B0", "A0", "A1", "B1", "A2", "B2"]


def test_reclaimed_to_its_partition_s_front_with_none_queued_it_starts_at_its_next_turn(
    r: redis.Redis,
) -> None:
    q = FairQueue(r, "jobs", reclaim_to="partition_front")
    fill(q, "A", 1, weight=3)
    fill(q, "B", 4, weight=2)
    a0 = take(q)
    expire(q, a0)
    again = take(q)  # a dequeue reclaims first: A0 starts at 3, behind B0 and B1
    assert again.payload == "B0"
    assert drain(q) == ["B1", "A0", "B2", "B3"]


def test_live_leases_are_not_reclaimed(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 3)
    leases = [take(q) for _ in range(3)]
    assert q.reclaim() == 0
    assert q.dequeue() is None
    assert all(q.ack(lease.task_id, lease.token) for lease in leases)


def test_release_puts_the_item_back_first_without_a_timeout(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 3)
    fill(q, "B", 3)
    a0 = take(q)
    assert q.release(a0.task_id, a0.token)
    assert not q.ack(a0.task_id, a0.token)
    again = take(q)
    assert (again.payload, again.timeouts) == ("A0", 0)
    assert q.ack(again.task_id, again.token)
    assert drain(q) == ["B0", "A1", "B1", "A2", "B2"]
    assert q.stats()["released"] == 1


def test_reclaim_works_after_a_redis_restart(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, appendonly=True, fsync="always").start()
    try:
        client = redis.Redis.from_url(server.url)
        q = FairQueue(client, "jobs")
        fill(q, "A", 2)
        lease = take(q)
        expire(q, lease)
        server.kill()
        server.start()  # same port and files: the append-only file brings the state back
        # Redis 7 keeps no scripts across a restart; older servers may replay them from the
        # append-only file, so empty the cache to be sure the next call meets NOSCRIPT.
        client.script_flush()
        assert q.reclaim() == 1  # the script is loaded again by itself
        assert drain(q) == ["A1", "A0"]
        client.close()
    finally:
        server.stop()


def test_duplicate_id_is_refused_while_queued_or_in_flight(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    q.enqueue("A", [Item("first", id="job-1")])
    with pytest.raises(ValueError, match="job-1"):
        q.enqueue("B", [Item("other", id="x"), Item("second", id="job-1")])
    assert q.length() == 1  # nothing of the refused batch was written
    lease = take(q)
    with pytest.raises(ValueError, match="already queued or in flight"):
        q.enqueue("B", [Item("second", id="job-1")])
    assert q.ack(lease.task_id, lease.token)
    q.enqueue("B", [Item("second", id="job-1")])  # finished ids may be used again
    assert drain(q) == ["second"]
