"""GET /admin/queues's fleet: the workers heard within FLEET_TTL_S by host and class and by
class, every class of the catalog listed, and each worker's host, class and memory; the queues'
and workers' other fields as they were. Against the real app and the suite's Redis, the
heartbeats written as workers write them (app/worker/presence.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from app.fleet.place import WorkerPlace
from app.settings import Settings
from app.store.keys import FLEET
from app.store.workers import Seen
from app.worker.presence import Presence
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY

pytestmark = pytest.mark.anyio
CATALOG = json.dumps(
    {"big": {"memory_gb": 80, "price": 2.0}, "small": {"memory_gb": 24, "price": 1.0}}
)
BIG_A = WorkerPlace("node-a", "big", 80.0, 2.0)
SMALL_A = WorkerPlace("node-a", "small", 24.0, 1.0)
SMALL_B = WorkerPlace("node-b", "small", 24.0, 1.0)


@pytest.fixture(scope="module")
def module_settings(base_settings: Settings, redis_server: Any) -> Settings:
    """The module's runtime, with a catalog of two classes."""
    return base_settings.model_copy(
        update={"redis_url": redis_server.url, "gpu_classes": CATALOG, "fleet_ttl_s": 600.0}
    )


@pytest.fixture
def api(shared_api: Api) -> Api:
    return shared_api


async def fleet_of(api: Api) -> dict[str, Any]:
    response = await api.client.get("/admin/queues", headers=KEY)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def host(name: str, gpu_class: str, memory_gb: float, **counts: int) -> dict[str, Any]:
    return {"host": name, "gpu_class": gpu_class, "memory_gb": memory_gb, **counts}


def of_class(
    gpu_class: str | None, memory_gb: float | None, price: float, **counts: int
) -> dict[str, Any]:
    return {"gpu_class": gpu_class, "memory_gb": memory_gb, "price": price, **counts}


def redis_now(r: redis.Redis) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6


async def test_the_fleet_counts_workers_by_host_and_class(api: Api, r: redis.Redis) -> None:
    every = api.runtime.settings.heartbeat_seconds
    Presence(r, "gpu0@node-a", ["short", "long"], every, BIG_A).busy(60)
    Presence(r, "gpu1@node-a", ["short", "long"], every, BIG_A).beat()
    Presence(r, "gpu2@node-a", ["short"], every, SMALL_A).beat()
    Presence(r, "gpu0@node-b", ["long"], every, SMALL_B).broken("CUDA error: unknown error")
    # A worker silent for a minute (its host restarting) keeps its place, not alive.
    silent = Seen(
        "gpu1@node-b", ("long",), redis_now(r) - 60, None, None, None, "node-b", "small", 24.0
    )
    r.hset(FLEET, silent.name, silent.encode())  # (its goodbye left only its place)

    body = await fleet_of(api)
    fleet = body["fleet"]
    assert fleet["ttl_s"] == 600.0
    assert fleet["hosts"] == [
        host("node-a", "big", 80.0, workers=2, alive=2, busy=1),
        host("node-a", "small", 24.0, workers=1, alive=1, busy=0),
        host("node-b", "small", 24.0, workers=1, alive=0, busy=0),  # broken: out; silent: in
    ]
    assert fleet["classes"] == [
        of_class("big", 80.0, 2.0, hosts=1, workers=2, alive=2, busy=1),
        of_class("small", 24.0, 1.0, hosts=2, workers=2, alive=1, busy=0),
    ]
    workers = {w["name"]: w for w in body["workers"]}
    assert (workers["gpu2@node-a"]["host"], workers["gpu2@node-a"]["gpu_class"]) == (
        "node-a",
        "small",
    )
    assert workers["gpu0@node-a"]["memory_gb"] == 80.0
    # The fields that were there before the fleet say what they said.
    assert workers["gpu0@node-b"]["alive"] is False
    assert workers["gpu0@node-b"]["broken"] == "CUDA error: unknown error"
    assert {q["name"]: q["workers"] for q in body["queues"]} == {"short": 3, "long": 2}


async def test_a_catalog_class_without_workers_is_listed_empty(api: Api) -> None:
    fleet = (await fleet_of(api))["fleet"]
    assert fleet["hosts"] == []
    assert [(c["gpu_class"], c["workers"], c["hosts"]) for c in fleet["classes"]] == [
        ("big", 0, 0),
        ("small", 0, 0),
    ]


async def test_without_a_catalog_the_fleet_is_one_class_with_no_name(
    settings: Settings, r: redis.Redis
) -> None:
    async with open_api(settings) as api:  # the suite's default settings: no GPU_CLASSES
        every = api.runtime.settings.heartbeat_seconds
        Presence(r, "cpu@node-c", ["short"], every, WorkerPlace("node-c", None, None, 1.0)).beat()
        Presence(r, "gpu0@old", ["short"], every).beat()  # a release before the fleet
        fleet = (await fleet_of(api))["fleet"]
    assert [(h["host"], h["gpu_class"], h["workers"]) for h in fleet["hosts"]] == [
        (None, None, 1),
        ("node-c", None, 1),
    ]
    assert fleet["classes"] == [of_class(None, None, 1.0, hosts=2, workers=2, alive=2, busy=0)]
