"""The heartbeat says the worker's place (host, class, memory), written by app/worker/presence.py
to the suite's real Redis and read back by app/store/workers.py; a heartbeat of a release before
the fleet, or one whose place is garbled, still reads as a worker."""

from __future__ import annotations

import json

import pytest
import redis

from app.fleet.place import WorkerPlace
from app.fleet.view import live_fleet
from app.store.keys import FLEET, WORKERS
from app.store.workers import Seen, parse, read
from app.worker.presence import Presence

BIG = WorkerPlace("node-1", "big", 80.0, 2.0)


def redis_now(r: redis.Redis) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6


def test_each_beat_says_the_workers_host_class_and_memory(r: redis.Redis) -> None:
    beats = Presence(r, "gpu0@node-1", ["short", "long"], every=1, place=BIG)
    beats.beat()
    written = json.loads(r.hget(WORKERS, "gpu0@node-1") or b"")
    assert (written["host"], written["gpu_class"], written["memory_gb"]) == ("node-1", "big", 80.0)
    assert "price" not in written  # the catalog has it: a heartbeat says what the worker is
    [worker] = read(r, redis_now(r))
    assert (worker.host, worker.gpu_class, worker.memory_gb) == ("node-1", "big", 80.0)


def test_a_worker_stopped_on_purpose_leaves_the_workers_but_keeps_its_place(
    r: redis.Redis,
) -> None:
    """A goodbye empties the worker's heartbeat, not its place in the fleet: a host that
    restarts its workers keeps its cards for FLEET_TTL_S."""
    beats = Presence(r, "gpu0@node-1", ["short", "long"], every=1, place=BIG)
    beats.beat()
    beats.stop()
    assert not r.hexists(WORKERS, "gpu0@node-1")
    assert r.hexists(FLEET, "gpu0@node-1")
    [kept] = live_fleet(r, 600.0, redis_now(r))
    assert (kept.name, kept.host, kept.gpu_class) == ("gpu0@node-1", "node-1", "big")


def test_the_place_stays_through_busy_idle_and_broken_beats(r: redis.Redis) -> None:
    beats = Presence(r, "gpu0@node-1", ["short"], every=1, place=BIG)
    beats.busy(30.0)
    assert read(r, redis_now(r))[0].gpu_class == "big"
    beats.busy(None)
    beats.broken("CUDA error: unknown error")
    [worker] = read(r, redis_now(r))
    assert (worker.host, worker.gpu_class, worker.broken) == (
        "node-1",
        "big",
        "CUDA error: unknown error",
    )


def test_a_worker_without_a_catalog_says_its_host_and_no_class(r: redis.Redis) -> None:
    Presence(r, "cpu@node-2", ["short"], 1, WorkerPlace("node-2", None, None, 1.0)).beat()
    written = json.loads(r.hget(WORKERS, "cpu@node-2") or b"")
    assert (written["host"], written["gpu_class"], written["memory_gb"]) == ("node-2", None, None)
    [worker] = read(r, redis_now(r))
    assert (worker.host, worker.gpu_class, worker.memory_gb) == ("node-2", None, None)


@pytest.mark.parametrize(
    "seen",
    [
        Seen("gpu0@a", ("short",), 1.5, host="a", gpu_class="big", memory_gb=80.0),
        Seen("gpu0@a", ("short",), 1.5, host="a"),
        Seen("gpu0@a", ("long",), 1.5, 9.0, "gone", host="a", gpu_class="s", memory_gb=16.5),
    ],
)
def test_a_placed_heartbeat_reads_back_as_it_was_written(seen: Seen) -> None:
    assert Seen.read(seen.name, seen.encode()) == seen


def test_a_heartbeat_of_a_release_before_the_fleet_reads_with_no_place() -> None:
    old = json.dumps({"queues": ["short"], "seen": 5.0, "busy_until": None, "running": None})
    assert parse({b"gpu0@box": old.encode()}) == [Seen("gpu0@box", ("short",), 5.0)]


@pytest.mark.parametrize(
    "place",
    [
        {"host": 7, "gpu_class": ["big"], "memory_gb": "80"},
        {"host": None, "gpu_class": None, "memory_gb": True},
        {"memory_gb": float("inf")},
    ],
)
def test_a_garbled_place_loses_only_what_is_garbled(place: dict[str, object]) -> None:
    raw = json.dumps({"queues": ["long"], "seen": 5.0, **place})
    assert parse({"w": raw}) == [Seen("w", ("long",), 5.0)]


def test_a_garbled_field_leaves_the_rest_of_the_place() -> None:
    raw = json.dumps({"queues": ["long"], "seen": 5.0, "host": "a", "memory_gb": "x"})
    assert parse({"w": raw}) == [Seen("w", ("long",), 5.0, host="a")]
