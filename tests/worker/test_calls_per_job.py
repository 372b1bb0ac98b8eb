"""A job costs its worker two calls to Redis's scripting: the lease that starts it, and the step
that records its end, bills it, credits its account, acks its lease and leases (and starts) the
next. Counted from INFO commandstats, around real runs of the service's job tasks (as
test_short_first.py runs them)."""

from __future__ import annotations

from collections.abc import Callable

import redis

from app.store.keys import billed_key, job_key
from tests.support import bills_of
from tests.worker.support import ALICE, BOB, Worker

#: The commands that run Lua: scripts (Redis 6.2) and functions (Redis 7).
SCRIPTING = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")


def scripting_calls(r: redis.Redis) -> int:
    """Scripting calls the server has run since it started."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in SCRIPTING)


def warm(w: Worker, r: redis.Redis) -> None:
    """One job first, so that every script or function is loaded before anything is counted."""
    w.submit(r, "short", "warm-up")
    w.trigger("short")
    assert w.ran == ["warm-up"]
    w.ran.clear()


def test_a_job_costs_its_worker_two_scripting_calls(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker(drain=True)
    warm(w, r)
    w.submit(r, "short", "J1")
    before = scripting_calls(r)
    w.trigger("short")
    assert scripting_calls(r) - before == 2  # the lease and start; the end, bill and ack
    assert w.ran == ["J1"]
    job = r.hgetall(job_key("J1"))
    assert (job[b"status"], job[b"attempts"]) == (b"SUCCESS", b"1")
    assert r.exists(billed_key("J1"))
    assert w.service.queues["short"].pending() == 0  # acked


def test_a_drain_costs_one_scripting_call_per_job_and_one_more(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker(drain=True)
    warm(w, r)
    names = ["S1", "S2", "L1", "S3", "L2"]
    for n, name in enumerate(names):
        w.submit(r, "short" if name[0] == "S" else "long", name, owner=(ALICE, BOB)[n % 2])
    before = scripting_calls(r)
    w.trigger("long")
    assert scripting_calls(r) - before == len(names) + 1
    assert sorted(w.ran) == sorted(names)
    for name in names:
        assert r.hget(job_key(name), "status") == b"SUCCESS"
    bills = [b for o in (ALICE, BOB) for b in bills_of(r, o)]
    assert sorted(b.task_id for b in bills if b.task_id != "warm-up") == sorted(names)
    queues = w.service.queues
    assert (queues["short"].pending(), queues["long"].pending()) == (0, 0)
