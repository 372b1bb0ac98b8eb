"""Workers' heartbeats in Redis (the suite's real server), app.worker.presence writing and
app.store.workers reading: written, read, counted alive per queue, removed on stop, forgotten
after a day, garbage skipped."""

from __future__ import annotations

import json

import pytest
import redis

from app.store.keys import WORKERS
from app.store.workers import ALIVE_BEATS, FORGET_S, Running, Seen, alive, parse, read
from app.worker.presence import Presence
from tests.support import wait_for


def redis_now(r: redis.Redis) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6


def entry(queues: list[str], seen: float) -> str:
    return json.dumps({"queues": queues, "seen": seen})


def test_a_beat_writes_the_workers_queues_and_redis_time(r: redis.Redis) -> None:
    before = redis_now(r)
    Presence(r, "gpu0@box", ["short", "long"], every=1).beat()
    after = redis_now(r)

    [worker] = read(r, after)
    assert (worker.name, worker.queues) == ("gpu0@box", ("short", "long"))
    assert before <= worker.seen <= after
    assert worker.busy_until is None
    assert json.loads(r.hget(WORKERS, "gpu0@box") or b"") == {
        "queues": ["short", "long"],
        "seen": worker.seen,
        "busy_until": None,
        "running": None,
    }


def test_a_busy_worker_says_until_when_on_redis_clock_and_then_that_it_is_idle(
    r: redis.Redis,
) -> None:
    beats = Presence(r, "gpu0@box", ["short"], every=1)
    before = redis_now(r)
    beats.busy(60.0)  # a job of a minute starts
    [worker] = read(r, redis_now(r))
    assert worker.busy_until is not None
    assert before + 60 <= worker.busy_until <= redis_now(r) + 60
    beats.beat()  # a periodic beat keeps saying it
    assert read(r, redis_now(r))[0].busy_until == worker.busy_until
    beats.busy(None)
    assert read(r, redis_now(r))[0].busy_until is None


def test_a_busy_worker_names_its_run_for_the_preemption_policy(r: redis.Redis) -> None:
    beats = Presence(r, "gpu0@box", ["long"], every=1)
    before = redis_now(r)
    beats.busy(600.0, Running("job-1", "alice", "long", preemptible=True))
    [worker] = read(r, redis_now(r))
    assert worker.running is not None
    assert (worker.running.job, worker.running.account, worker.running.kind) == (
        "job-1",
        "alice",
        "long",
    )
    assert worker.running.preemptible and before <= worker.running.since <= redis_now(r)
    beats.beat()
    assert read(r, redis_now(r))[0].running == worker.running  # each beat says it again
    beats.busy(None)
    assert read(r, redis_now(r))[0].running is None


def test_a_heartbeat_whose_run_this_release_cannot_read_names_none(r: redis.Redis) -> None:
    entry = {"queues": ["long"], "seen": redis_now(r), "running": {"job": "j", "since": "x"}}
    r.hset(WORKERS, "gpu9@box", json.dumps(entry))
    [worker] = read(r, redis_now(r))
    assert worker.name == "gpu9@box" and worker.running is None


def test_a_later_beat_replaces_the_earlier_one(r: redis.Redis) -> None:
    beats = Presence(r, "gpu0@box", ["short"], every=1)
    beats.beat()
    [first] = read(r, redis_now(r))
    beats.beat()
    [second] = read(r, redis_now(r))
    assert second.seen >= first.seen
    assert r.hlen(WORKERS) == 1


def test_a_started_worker_beats_until_stopped_and_then_leaves(r: redis.Redis) -> None:
    beats = Presence(r, "cpu@box", ["short"], every=0.05)
    beats.start()
    try:
        [first] = wait_for(lambda: read(r, redis_now(r)), 10, "the first beat")
        wait_for(
            lambda: [w for w in read(r, redis_now(r)) if w.seen > first.seen], 10, "a new beat"
        )
    finally:
        beats.stop()
    assert not beats._thread.is_alive()
    assert r.hlen(WORKERS) == 0
    assert read(r, redis_now(r)) == []


def test_stopping_a_worker_that_never_started_removes_its_entry(r: redis.Redis) -> None:
    beats = Presence(r, "cpu@box", ["long"], every=1)
    beats.beat()
    beats.stop()
    assert not r.hexists(WORKERS, "cpu@box")


def test_stop_removes_only_its_own_entry(r: redis.Redis) -> None:
    mine, other = Presence(r, "a@box", ["short"], 1), Presence(r, "b@box", ["short"], 1)
    mine.beat()
    other.beat()
    mine.stop()
    assert [w.name for w in read(r, redis_now(r))] == ["b@box"]


def test_entries_a_day_old_are_forgotten_and_deleted(r: redis.Redis) -> None:
    now = redis_now(r)
    r.hset(
        WORKERS,
        mapping={
            "old@box": entry(["short"], now - FORGET_S - 1),
            "recent@box": entry(["short"], now - FORGET_S + 60),
            "live@box": entry(["short"], now),
        },
    )
    seen = read(r, now)
    assert {w.name for w in seen} == {"recent@box", "live@box"}
    assert not r.hexists(WORKERS, "old@box")
    assert r.hexists(WORKERS, "recent@box")
    # Remembered for a day, but alive only while its beats are recent.
    assert [w.name for w in alive(seen, "short", now, heartbeat_s=10)] == ["live@box"]


GARBAGE = {
    "not json": "{queues",
    "no queues": json.dumps({"seen": 1.0}),
    "no seen": json.dumps({"queues": ["short"]}),
    "null seen": json.dumps({"queues": ["short"], "seen": None}),
    "text seen": json.dumps({"queues": ["short"], "seen": "yesterday"}),
    "numeric queues": json.dumps({"queues": 7, "seen": 1.0}),
    "text busy_until": json.dumps({"queues": ["short"], "seen": 1.0, "busy_until": "soon"}),
}
#: JSON that is not an object at all.
NOT_OBJECTS = {"a list": "[1, 2]", "a number": "5", "a string": '"short"', "null": "null"}


def test_garbage_entries_are_skipped(r: redis.Redis) -> None:
    now = redis_now(r)
    r.hset(WORKERS, mapping={**GARBAGE, "good@box": entry(["long"], now)})
    r.hset(WORKERS, b"bad-bytes", b"\xff\xfe")
    seen = read(r, now)
    assert seen == [Seen("good@box", ("long",), seen[0].seen)]
    assert [w.name for w in alive(seen, "long", now, heartbeat_s=10)] == ["good@box"]


@pytest.mark.parametrize("name", GARBAGE.keys())
def test_each_garbage_value_alone_is_skipped(name: str) -> None:
    assert parse({b"w@box": GARBAGE[name].encode()}) == []


@pytest.mark.parametrize("name", NOT_OBJECTS.keys())
def test_an_entry_that_is_not_a_json_object_is_skipped(r: redis.Redis, name: str) -> None:
    now = redis_now(r)
    r.hset(WORKERS, mapping={"odd@box": NOT_OBJECTS[name], "good@box": entry(["short"], now)})
    assert [w.name for w in read(r, now)] == ["good@box"]


def test_parse_reads_bytes_and_text_alike() -> None:
    raw = entry(["short"], 12.5)
    assert parse({b"a": raw.encode()}) == parse({"a": raw}) == [Seen("a", ("short",), 12.5)]
    busy = json.dumps({"queues": ["long"], "seen": 1.0, "busy_until": 9})
    assert parse({"b": busy}) == [Seen("b", ("long",), 1.0, 9.0)]


def test_a_worker_is_alive_for_the_queues_it_serves_within_its_last_beats() -> None:
    now, every = 1000.0, 2.0
    cutoff = now - ALIVE_BEATS * every
    workers = [
        Seen("both", ("short", "long"), now),
        Seen("short", ("short",), cutoff),  # exactly at the edge: still alive
        Seen("late", ("short",), cutoff - 0.001),
        Seen("long", ("long",), now - 1),
    ]
    assert [w.name for w in alive(workers, "short", now, every)] == ["both", "short"]
    assert [w.name for w in alive(workers, "long", now, every)] == ["both", "long"]
    assert alive(workers, "other", now, every) == []
