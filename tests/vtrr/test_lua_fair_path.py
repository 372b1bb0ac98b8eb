"""The fair path's dequeue and ack (dequeue_unlimited.lua, ack.lua) name none of the limits'
keys, so that a queue without limits pays nothing for them. Where they would need those keys
they answer nil and change nothing, and FairQueue calls the operation that names them
(dequeue.lua, ack_limited.lua): the two calls are one dequeue, or one ack. Each case runs on
both engines (a function library, whose functions keep their keys' table from call to call, and
a script per operation)."""

from __future__ import annotations

from typing import Any

import redis

from app.vtrr import FairQueue, Limits
from app.vtrr.lua_text import operation
from app.vtrr.queue import FULL_PATH_CALLS
from app.vtrr.wire import micros
from tests.vtrr.helpers import expire, fill, take

Engine = tuple[str, redis.Redis]
LIMITS_KEYS = {"limits", "reps", "park", "live", "freed", "trigger_message", "broker"}


def everything(r: redis.Redis) -> dict[str, Any]:
    """What every key of the database holds, by type."""
    held: dict[str, Any] = {}
    for key in r.keys("*"):
        kind = str(r.type(key))
        if "hash" in kind:
            held[str(key)] = r.hgetall(key)
        elif "zset" in kind:
            held[str(key)] = r.zrange(key, 0, -1, withscores=True)
        elif "set" in kind:
            held[str(key)] = r.smembers(key)
        elif "list" in kind:
            held[str(key)] = r.lrange(key, 0, -1)
        else:
            held[str(key)] = r.get(key)
    assert held  # (a queue's keys are there to compare)
    return held


def fast_dequeue(q: FairQueue) -> Any:
    return q.scripts.run("dequeue_unlimited", micros(q.lease_seconds), "token", q.reclaim_limit)


def test_the_fair_path_names_none_of_the_limits_keys() -> None:
    for name in ("dequeue_unlimited", "ack"):
        assert set(operation(name).keys) & LIMITS_KEYS == set(), name


def test_a_limited_partition_s_item_in_front_is_left_for_dequeue_lua(engine: Engine) -> None:
    kind, r = engine
    q = FairQueue(r, f"fast-limited-{kind}", lease_seconds=30)
    fill(q, "A", 2)
    fill(q, "B", 1)
    q.set_limits("A", Limits(most_in_flight=1))
    before = everything(r)
    assert fast_dequeue(q) is None
    assert everything(r) == before
    assert take(q).payload == "A0"  # dequeue.lua leases it, as before


def test_an_expired_lease_is_left_for_dequeue_lua_to_reclaim(engine: Engine) -> None:
    kind, r = engine
    q = FairQueue(r, f"fast-expired-{kind}", lease_seconds=30)
    fill(q, "A", 2)
    expire(q, take(q))
    before = everything(r)
    assert fast_dequeue(q) is None
    assert everything(r) == before
    assert take(q).payload == "A1"  # A0 reclaimed first, charged again: behind A1
    assert q.stats()["reclaimed"] == 1
    assert take(q).payload == "A0"


def test_a_wait_over_on_an_empty_queue_is_left_for_dequeue_lua(engine: Engine) -> None:
    kind, r = engine
    q = FairQueue(r, f"fast-wait-{kind}", lease_seconds=30)
    fill(q, "A", 2)
    q.set_limits("A", Limits(most_in_flight=1))
    first = take(q)
    r.zadd(q.keys.waits, {"A": 0})  # as if A's held weight had run down by now
    before = everything(r)
    assert fast_dequeue(q) is None
    assert everything(r) == before
    assert q.dequeue() is None  # dequeue.lua wakes A, which still has one in flight
    assert q.ack(first.task_id, first.token)
    assert take(q).payload == "A1"


def test_an_item_of_a_limited_partition_is_acked_by_ack_limited(engine: Engine) -> None:
    kind, r = engine
    q = FairQueue(r, f"fast-ack-{kind}", lease_seconds=30)
    fill(q, "A", 2)
    q.set_limits("A", Limits(most_in_flight=1))
    first = take(q)
    before = everything(r)
    assert q.scripts.run("ack", first.task_id, first.token) is None
    assert everything(r) == before
    assert q.ack(first.task_id, first.token)
    assert take(q).payload == "A1"  # its partition's next item started once it landed
    assert not q.ack(first.task_id, first.token)  # stale now, on either path


def test_a_queue_whose_tries_fail_goes_straight_to_the_full_calls_for_a_while(
    engine: Engine,
) -> None:
    kind, r = engine
    q = FairQueue(r, f"fast-sticky-{kind}", lease_seconds=30)
    fill(q, "A", 6)
    q.set_limits("A", Limits(most_in_flight=1))
    called: list[str] = []
    run = q.scripts.run

    def recorded(name: str, *args: Any) -> Any:
        called.append(name)
        return run(name, *args)

    q.scripts.run = recorded  # type: ignore[method-assign]
    for n in range(6):
        lease = take(q)
        assert lease.payload == f"A{n}"
        assert q.ack(lease.task_id, lease.token)
    # the first try failed; the next FULL_PATH_CALLS calls skip it, so each pair is two calls
    assert called[:2] == ["dequeue_unlimited", "dequeue"]
    assert called[2:] == ["ack_limited", "dequeue"] * 5 + ["ack_limited"]
    assert len(called) < FULL_PATH_CALLS
