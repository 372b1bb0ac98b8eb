"""A queue written in the 0.1 layout (five shared hashes, expiries in seconds, dequeues and acks
counted) is rewritten into the current one by `python -m app.vtrr.migrate`: queued items keep
their places, leases their holders, and the counters read as before."""

from __future__ import annotations

import json

import pytest
import redis

from app.vtrr import FairQueue
from app.vtrr.keys import Keys
from app.vtrr.migrate import main, migrate, old_key


def old_queue(r: redis.Redis, name: str) -> None:
    """What the 0.1 scripts left after enqueue a0 a1 b0 (weight 1 each), dequeue a0 with token
    tok under a lease to t=2e9 s, and one ack and one reclaim long before."""
    k = Keys.for_queue(name)
    member = {"a1": "1000000000000002:a1", "b0": "1000000000000003:b0"}
    r.zadd(k.queue, {member["a1"]: 1.0, member["b0"]: 0.0})
    for task_id, m in member.items():
        p = task_id[0]
        r.hset(old_key(k, "task"), task_id, f"payload-{task_id}")
        r.hset(old_key(k, "meta"), task_id, json.dumps({"p": p, "c": "1", "w": "1", "m": m}))
        r.zadd(k.partition_items, {f"1:{p}:{m}": 0})
    r.hset(old_key(k, "inflight_task"), "a0", "payload-a0")
    r.hset(old_key(k, "meta"), "a0", json.dumps({"p": "a", "c": "1", "w": "1", "m": "x"}))
    r.hset(old_key(k, "lease"), "a0", "tok")
    r.hset(old_key(k, "timeouts"), "a0", 1)
    r.zadd(k.inflight, {"a0": 2e9})
    r.set(k.current_virtual_time, 0)
    r.hset(k.partition_virtual_time, mapping={"a": 2, "b": 1})
    r.hset(k.partition_queued, mapping={"a": 1, "b": 1})
    r.hset(k.stats, mapping={"enqueued": 4, "dequeued": 3, "acked": 1, "reclaimed": 1})


def test_an_old_queue_keeps_its_order_leases_and_counts(r: redis.Redis) -> None:
    old_queue(r, "jobs")
    q = FairQueue(r, "jobs")

    assert migrate(r, "jobs") == 3
    assert migrate(r, "jobs") == 0  # nothing of the old layout is left: a second run is a no-op
    assert not any(r.exists(old_key(q.keys, part)) for part in ("task", "meta", "lease"))

    assert (q.length(), q.pending(), q.positions(["b0", "a1", "a0"])) == (2, 1, [0, 1, None])
    assert q.expiry("a0") == 2e9
    resumed = q.resume("a0", "tok")  # the lease's holder still holds it
    assert resumed is not None and (resumed.payload, resumed.timeouts) == ("payload-a0", 1)
    assert q.stats()["dequeued"] == 3 and q.stats()["acked"] == 1
    assert q.ack("a0", "tok")
    taken = [q.dequeue(), q.dequeue()]
    assert [(t.task_id, t.payload) for t in taken if t] == [
        ("b0", "payload-b0"),
        ("a1", "payload-a1"),
    ]
    stats = q.stats()
    assert (stats["enqueued"], stats["dequeued"], stats["acked"]) == (4, 5, 2)


def test_the_command_names_each_queue_it_moved(
    r: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    old_queue(r, "short")
    assert main(["--redis-url", redis_url, "short", "long"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "short: 3 items moved to the current layout",
        "long: 0 items moved to the current layout",
    ]
