"""RedisQueue: redq's reliable FIFO on the fair queue engine."""

from __future__ import annotations

import threading

import pytest
import redis

from app.vtrr import DropRefusedError, RedisQueue


def test_fifo_with_put_first_and_get_last(r: redis.Redis) -> None:
    q = RedisQueue(r, "redq")
    for value in ["a", "b", "c"]:
        q.put(value)
    q.put_first("urgent")
    assert q.length() == 4
    first = q.get()
    last = q.get_last()
    assert first is not None and last is not None
    assert (first.task, last.task) == ("urgent", "c")
    assert [q.get().task for _ in range(2)] == ["a", "b"]  # type: ignore[union-attr]
    assert q.get() is None
    assert q.pending() == 4


def test_values_round_trip_as_json(r: redis.Redis) -> None:
    q = RedisQueue(r)
    value = {"file": "a.pdf", "pages": [1, 2], "ok": True, "note": None}
    q.put(value)
    task = q.get()
    assert task is not None and task.task == value


def test_task_done_finishes_a_delivery_once(r: redis.Redis) -> None:
    q = RedisQueue(r)
    q.put("job")
    task = q.get()
    assert task is not None
    assert q.task_done(task.taskid) == task.taskid
    assert q.task_done(task.taskid) is None
    assert q.pending() == 0


def test_task_reset_hands_the_item_to_the_next_get(r: redis.Redis) -> None:
    q = RedisQueue(r)
    q.put("first")
    q.put("second")
    task = q.get()
    assert task is not None
    assert q.task_reset(task.taskid)
    assert not q.task_reset(task.taskid)  # the lease is gone: nothing to reset twice
    assert q.length() == 2
    again = q.get()
    assert again is not None and again.task == "first"


def test_stale_lease_goes_back_to_the_front_and_old_holder_is_refused(r: redis.Redis) -> None:
    q = RedisQueue(r, ttl=3600)
    q.put("slow")
    q.put("next")
    stale = q.get()
    assert stale is not None
    item_id, token = stale.taskid.split(":")
    assert q._queue.extend(item_id, token, 1e-6)  # the ttl runs out now
    again = q.get()  # garbage collection hands it out again, from the front
    assert again is not None and again.task == "slow"
    assert q.task_done(stale.taskid) is None
    assert q.task_done(again.taskid) == again.taskid


def test_without_gc_a_stale_lease_stays_pending(r: redis.Redis) -> None:
    q = RedisQueue(r, gc=False)
    q.put("slow")
    stale = q.get()
    assert stale is not None
    item_id, token = stale.taskid.split(":")
    assert q._queue.extend(item_id, token, 1e-6)
    assert q.get() is None
    assert q.pending() == 1


def test_without_safemode_get_pops_for_good(r: redis.Redis) -> None:
    q = RedisQueue(r, safemode=False)
    q.put("job")
    task = q.get()
    assert task is not None and task.task == "job"
    assert q.pending() == 0
    assert q.task_done(task.taskid) == task.taskid  # a no-op, as in redq
    assert q.length() == 0


def test_position_and_promote_by_item_id(r: redis.Redis) -> None:
    q = RedisQueue(r)
    ids = [q.put(i) for i in range(4)]
    assert [q.position(i) for i in ids] == [0, 1, 2, 3]
    assert q.promote(ids[3])
    assert q.position(ids[3]) == 0
    assert q.get().task == 3  # type: ignore[union-attr]


def test_blocking_get_waits_for_a_put(r: redis.Redis, redis_url: str) -> None:
    q = RedisQueue(r)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(q.get(blocking=True, timeout=10)))
    waiter.start()
    producer = RedisQueue(redis.Redis.from_url(redis_url))
    producer.put("wake up")
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert got and got[0] is not None and got[0].task == "wake up"  # type: ignore[attr-defined]


def test_blocking_get_gives_up_after_its_timeout(r: redis.Redis) -> None:
    q = RedisQueue(r)
    assert q.get(blocking=True, timeout=0.05) is None


def test_drop_needs_the_name(r: redis.Redis) -> None:
    q = RedisQueue(r, "mine")
    q.put("x")
    with pytest.raises(DropRefusedError):
        q.drop("redq")
    q.drop("mine")
    assert q.length() == 0
