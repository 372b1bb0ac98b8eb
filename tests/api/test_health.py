"""GET /health, and every endpoint while Redis is unreachable: 503 with Retry-After, never a 500."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.dev.redis_server import RedisServer, free_port
from app.settings import Settings
from app.store.keys import WORKERS
from app.store.workers import ALIVE_BEATS
from app.worker.presence import Presence
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, SECOND_KEY, UNAUTHORIZED, UNAVAILABLE, USERS_FILE, Worker

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): what health says is read from
    Redis, emptied for each test."""
    return shared_api


@pytest.fixture
def down_port() -> int:
    return free_port()


@pytest.fixture
async def api_without_redis(down_port: int) -> AsyncIterator[Api]:
    settings = Settings(redis_url=f"redis://127.0.0.1:{down_port}/0", users_file=USERS_FILE)
    async with open_api(settings, wait_for_hub=False) as opened:
        yield opened


async def submit(api: Api, kind: str, key: dict[str, str] = KEY) -> str:
    response = await api.client.post(
        "/enqueue-task", json={"kind": kind, "duration_s": 5}, headers=key
    )
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


# -- Redis up -------------------------------------------------------------------------------------
async def test_health_is_ok_with_empty_queues(api: Api) -> None:
    response = await api.client.get("/health")

    assert response.status_code == 200
    assert response.json() == {"redis": "ok", "queues": {"short": 0, "long": 0}, "workers_ready": 0}


async def test_health_counts_the_jobs_waiting_in_each_queue(api: Api, worker: Worker) -> None:
    await submit(api, "short")
    await submit(api, "short", SECOND_KEY)
    await submit(api, "long")
    assert (await api.client.get("/health")).json() == {
        "redis": "ok",
        "queues": {"short": 2, "long": 1},
        "workers_ready": 0,
    }

    worker.lease("short")  # in flight now, no longer waiting

    assert (await api.client.get("/health")).json() == {
        "redis": "ok",
        "queues": {"short": 1, "long": 1},
        "workers_ready": 0,
    }


async def test_health_counts_the_workers_that_take_jobs(api: Api, worker: Worker) -> None:
    every = api.runtime.settings.heartbeat_seconds
    Presence(worker.client, "gpu0@a", ["short", "long"], every).beat()
    Presence(worker.client, "gpu1@a", ["long"], every).beat()
    assert (await api.client.get("/health")).json()["workers_ready"] == 2

    Presence(worker.client, "gpu1@a", ["long"], every).broken("its device is unusable: test")
    seconds, _ = worker.client.time()
    stale = {"queues": ["short"], "seen": seconds - ALIVE_BEATS * every - 1}
    worker.client.hset(WORKERS, "gpu2@a", json.dumps(stale))  # stopped beating: dead

    response = await api.client.get("/health")
    assert response.status_code == 200  # none ready would still be 200: the API serves
    assert response.json()["workers_ready"] == 1


async def test_health_needs_no_key_and_ignores_a_wrong_one(api: Api) -> None:
    for headers in ({}, {"X-API-Key": "wrong"}):
        response = await api.client.get("/health", headers=headers)
        assert response.status_code == 200


# -- Redis down -----------------------------------------------------------------------------------
async def test_health_is_503_with_retry_after_when_redis_is_unreachable(
    api_without_redis: Api,
) -> None:
    response = await api_without_redis.client.get("/health")

    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "redis": "unreachable: ConnectionError",
        "queues": {},
        "detail": "Redis does not answer; the service recovers by itself once it does",
    }


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/enqueue-task", {"kind": "short", "duration_s": 5}),
        ("GET", f"/task-status/{uuid.uuid4()}", None),
        ("GET", f"/task-status/stream/{uuid.uuid4()}", None),
        ("GET", "/billing-records", None),
    ],
    ids=["enqueue", "status", "stream", "billing"],
)
async def test_an_endpoint_that_needs_redis_is_503_json_when_it_is_unreachable(
    api_without_redis: Api, method: str, path: str, body: object
) -> None:
    response = await api_without_redis.client.request(method, path, json=body, headers=KEY)

    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "5"
    assert response.headers["content-type"] == "application/json"
    assert response.json() == UNAVAILABLE


async def test_bad_requests_are_refused_without_redis_as_with_it(api_without_redis: Api) -> None:
    client = api_without_redis.client

    no_key = await client.post("/enqueue-task", json={"kind": "short", "duration_s": 5})
    invalid = await client.post("/enqueue-task", json={"kind": "x"}, headers=KEY)
    malformed_id = await client.get("/task-status/nope", headers=KEY)

    assert (no_key.status_code, no_key.json()) == (401, UNAUTHORIZED)
    assert invalid.status_code == 422
    assert (malformed_id.status_code, malformed_id.json()) == (404, {"detail": "task not found"})


async def test_the_api_recovers_when_redis_comes_back(
    api_without_redis: Api, down_port: int, tmp_path: Path
) -> None:
    client = api_without_redis.client
    assert (await client.get("/health")).status_code == 503

    with RedisServer(tmp_path, port=down_port):
        health = await client.get("/health")
        enqueued = await client.post(
            "/enqueue-task", json={"kind": "long", "duration_s": 5}, headers=KEY
        )

    assert health.json() == {"redis": "ok", "queues": {"short": 0, "long": 0}, "workers_ready": 0}
    assert enqueued.status_code == 200, enqueued.text
