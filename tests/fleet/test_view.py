"""The fleet (app/fleet/view.py): the workers heard within FLEET_TTL_S, a silent one keeping its
place, a broken one out; the classes it has; and its counts by host and by class, read from the
heartbeats in the suite's real Redis."""

from __future__ import annotations

import json

import pytest
import redis

from app.fleet import view
from app.fleet.catalog import Catalog
from app.store.keys import FLEET
from app.store.workers import ALIVE_BEATS, Seen, parse

TTL_S, EVERY = 600.0, 10.0
CATALOG = Catalog.from_json(
    json.dumps(
        {
            "big": {"memory_gb": 80, "price": 2.0},
            "small": {"memory_gb": 24, "price": 1.0},
            "tiny": {"memory_gb": 16, "price": 0.5},
        }
    )
)


def redis_now(r: redis.Redis) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6


def worker(name: str, seen: float, host: str, gpu_class: str | None, **fields: object) -> Seen:
    memory = {"big": 80.0, "small": 24.0, "tiny": 16.0}.get(gpu_class or "")
    return Seen(name, ("short", "long"), seen, host=host, gpu_class=gpu_class, memory_gb=memory)


def beat(r: redis.Redis, *workers: Seen) -> None:
    r.hset(FLEET, mapping={w.name: w.encode() for w in workers})


def test_the_fleet_is_the_workers_heard_within_the_ttl(r: redis.Redis) -> None:
    now = redis_now(r)
    beat(
        r,
        worker("gpu0@a", now, "a", "big"),
        worker("gpu1@a", now - TTL_S + 5, "a", "big"),  # its host restarts: it keeps its place
        worker("gpu0@b", now - TTL_S - 5, "b", "small"),  # gone for longer: out
    )
    assert sorted(w.name for w in view.live_fleet(r, TTL_S, now)) == ["gpu0@a", "gpu1@a"]
    assert view.live_classes(view.live_fleet(r, TTL_S, now)) == {"big"}
    # The one gone longer is forgotten: the fleet's hash does not grow with every name ever.
    assert not r.hexists(FLEET, "gpu0@b")
    assert len(view.live_fleet(r, TTL_S + 10, now)) == 2


def test_a_broken_worker_is_out_of_the_fleet(r: redis.Redis) -> None:
    now = redis_now(r)
    broken = Seen("gpu0@a", ("short",), now, broken="gone", host="a", gpu_class="big")
    beat(r, broken, worker("gpu1@a", now, "a", "small"))
    assert [w.name for w in view.live_fleet(r, TTL_S, now)] == ["gpu1@a"]


@pytest.mark.anyio
async def test_the_api_reads_the_same_fleet(r: redis.Redis, redis_url: str) -> None:
    now = redis_now(r)
    beat(r, worker("gpu0@a", now, "a", "big"), worker("gpu0@b", now - 2 * TTL_S, "b", "small"))
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        fleet = await view.live_fleet_async(client, TTL_S, now)
    finally:
        await client.aclose()
    assert [w.name for w in fleet] == ["gpu0@a"]


def test_without_a_catalog_the_fleet_has_no_classes(r: redis.Redis) -> None:
    now = redis_now(r)
    beat(r, worker("cpu@a", now, "a", None))
    fleet = view.live_fleet(r, TTL_S, now)
    assert [w.name for w in fleet] == ["cpu@a"] and view.live_classes(fleet) == set()


def test_the_fleet_by_host_and_class_counts_workers_alive_and_busy() -> None:
    now = 10_000.0
    silent = now - ALIVE_BEATS * EVERY - 1
    busy = Seen("gpu1@a", ("short",), now, now + 60, host="a", gpu_class="big", memory_gb=80.0)
    workers = [
        worker("gpu0@a", now, "a", "big"),
        busy,
        worker("gpu2@a", silent, "a", "small"),  # silent: in the fleet, not alive
        worker("gpu0@b", now, "b", "small"),
        worker("gpu1@b", now - 2 * TTL_S, "b", "small"),  # out of the fleet
    ]
    found = view.summary(workers, CATALOG, TTL_S, now, EVERY)
    hosts = [(h.host, h.gpu_class, h.memory_gb, h.workers, h.alive, h.busy) for h in found.hosts]
    assert hosts == [
        ("a", "big", 80.0, 2, 2, 1),
        ("a", "small", 24.0, 1, 0, 0),
        ("b", "small", 24.0, 1, 1, 0),
    ]
    classes = [
        (c.gpu_class, c.price, len(c.hosts), c.workers, c.alive, c.busy) for c in found.classes
    ]
    assert classes == [
        ("big", 2.0, 1, 2, 2, 1),
        ("small", 1.0, 2, 2, 1, 0),
        ("tiny", 0.5, 0, 0, 0, 0),  # every class of the catalog, those without a worker too
    ]


def test_a_class_the_catalog_lacks_is_counted_without_a_price() -> None:
    now = 10_000.0
    found = view.summary([worker("gpu0@c", now, "c", "old")], CATALOG, TTL_S, now, EVERY)
    assert [(c.gpu_class, c.price, c.workers) for c in found.classes][-1] == ("old", None, 1)


def test_without_a_catalog_one_class_with_no_name_memory_or_limit() -> None:
    now = 10_000.0
    old = parse({"gpu0@x": json.dumps({"queues": ["short"], "seen": now})})  # no place at all
    found = view.summary(
        [*old, worker("cpu@a", now, "a", None)], Catalog.single(), TTL_S, now, EVERY
    )
    assert [(h.host, h.gpu_class, h.workers) for h in found.hosts] == [
        (None, None, 1),
        ("a", None, 1),
    ]
    [only] = found.classes
    assert (only.gpu_class, only.memory_gb, only.price, only.workers) == (None, None, 1.0, 2)
