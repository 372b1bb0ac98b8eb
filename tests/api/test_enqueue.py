"""POST /enqueue-task: an accepted job is recorded and queued fairly; anything else is a 4xx with
a JSON body that changes nothing in Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis

from app.vtrr.keys import Keys
from tests.api.conftest import Api
from tests.api.helpers import (
    KEY,
    OWNER,
    SECOND_KEY,
    TEAM,
    TEAM_KEY,
    UNAUTHORIZED,
    Untouched,
    Worker,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): a submit's answer and what it
    writes live in Redis, emptied for each test."""
    return shared_api


JSON = {"content-type": "application/json"}
LIMIT = 64 * 1024


async def enqueue(api: Api, body: Any = None, key: dict[str, str] = KEY) -> httpx.Response:
    return await api.client.post(
        "/enqueue-task", json=body or {"kind": "short", "duration_s": 5}, headers=key
    )


async def test_an_accepted_job_answers_its_uuid_as_queued(api: Api) -> None:
    response = await enqueue(api)

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body == {"task_id": body["task_id"], "status": "queued", "result": None}
    assert str(uuid.UUID(body["task_id"])) == body["task_id"]


async def test_an_accepted_job_is_recorded_pending_for_the_account(
    api: Api, r: redis.Redis
) -> None:
    task_id = (await enqueue(api, {"kind": "long", "duration_s": 120.5})).json()["task_id"]

    job = {k.decode(): v.decode() for k, v in r.hgetall(f"fairgpu:job:{task_id}").items()}
    assert job["task_id"] == task_id
    assert job["owner"] == OWNER
    assert job["kind"] == "long"
    assert job["status"] == "PENDING"
    assert job["attempts"] == "0"
    assert float(job["duration_s"]) == 120.5
    assert r.xlen(f"fairgpu:events:{task_id}") == 1  # the PENDING event


async def test_an_accepted_job_waits_in_the_fair_queue_of_its_kind(
    api: Api, r: redis.Redis, worker: Worker
) -> None:
    task_id = (await enqueue(api)).json()["task_id"]

    short, long = Keys.for_queue("short"), Keys.for_queue("long")
    assert r.zcard(short.queue) == 1
    assert worker.service.queues["short"].has(task_id)
    assert r.zcard(long.queue) == 0
    assert worker.service.queues["short"].position(task_id) == 0


async def test_jobs_of_several_accounts_are_partitioned_by_account(
    api: Api, worker: Worker
) -> None:
    first = (await enqueue(api)).json()["task_id"]
    second = (await enqueue(api)).json()["task_id"]
    other = (await enqueue(api, key=SECOND_KEY)).json()["task_id"]

    # The other account's job is not behind both of the first account's: fair order, not arrival.
    queue = worker.service.queues["short"]
    assert [queue.position(t) for t in (first, other, second)] == [0, 1, 2]


@pytest.mark.parametrize(
    ("kind", "duration_s"),
    [("short", 60), ("short", 0.001), ("long", 3000), ("long", 60.5), ("short", 1)],
)
async def test_durations_up_to_the_kinds_limit_are_accepted(
    api: Api, kind: str, duration_s: float
) -> None:
    response = await enqueue(api, {"kind": kind, "duration_s": duration_s})

    assert response.status_code == 200, response.text


# -- 401 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "headers",
    [{}, {"X-API-Key": "wrong_key"}, {"X-API-Key": ""}, {"X-API-Key": "default_api_key "}],
    ids=["missing", "wrong", "empty", "trailing-space"],
)
async def test_a_missing_or_wrong_key_is_401_and_writes_nothing(
    api: Api, r: redis.Redis, headers: dict[str, str]
) -> None:
    await enqueue(api)  # something in Redis that a write would change
    with Untouched(r):
        response = await enqueue(api, key=headers)

    assert response.status_code == 401
    assert response.json() == UNAUTHORIZED
    assert response.headers["www-authenticate"] == "ApiKey"


async def test_a_missing_key_is_401_even_with_an_invalid_body(api: Api, r: redis.Redis) -> None:
    with Untouched(r):
        response = await api.client.post("/enqueue-task", json={"kind": "gpu"})

    assert response.status_code == 401
    assert response.json() == UNAUTHORIZED


# -- 422 ------------------------------------------------------------------------------------------
INVALID_BODIES = {
    "unknown-kind": '{"kind": "medium", "duration_s": 5}',
    "kind-case": '{"kind": "SHORT", "duration_s": 5}',
    "zero": '{"kind": "short", "duration_s": 0}',
    "negative": '{"kind": "short", "duration_s": -1}',
    "over-short": '{"kind": "short", "duration_s": 60.5}',
    "over-long": '{"kind": "long", "duration_s": 3000.5}',
    "huge": '{"kind": "long", "duration_s": 1e308}',
    "string": '{"kind": "short", "duration_s": "5"}',
    "bool": '{"kind": "short", "duration_s": true}',
    "null": '{"kind": "short", "duration_s": null}',
    "list": '{"kind": "short", "duration_s": [5]}',
    "no-duration": '{"kind": "short"}',
    "no-kind": '{"duration_s": 5}',
    "empty-object": "{}",
    "extra-field": '{"kind": "short", "duration_s": 5, "priority": 9}',
    "not-json": "kind=short&duration_s=5",
    "truncated": '{"kind": "short", "duration_s": 5',
    "array": '[{"kind": "short", "duration_s": 5}]',
    "string-body": '"short"',
    "empty-body": "",
}


@pytest.mark.parametrize("body", INVALID_BODIES.values(), ids=INVALID_BODIES.keys())
async def test_an_invalid_job_is_422_with_a_json_detail_and_writes_nothing(
    api: Api, r: redis.Redis, body: str
) -> None:
    await enqueue(api)
    with Untouched(r):
        response = await api.client.post("/enqueue-task", content=body, headers={**KEY, **JSON})

    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/json"
    detail = response.json()["detail"]
    assert detail
    assert isinstance(detail, str | list)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
async def test_a_non_finite_duration_is_422_and_writes_nothing(
    api: Api, r: redis.Redis, number: str
) -> None:
    """Python's JSON parser accepts NaN and Infinity; the API must refuse them as invalid,
    not crash on echoing them back in the 422 body."""
    with Untouched(r):
        response = await api.client.post(
            "/enqueue-task",
            content=f'{{"kind": "short", "duration_s": {number}}}',
            headers={**KEY, **JSON},
        )

    assert response.status_code == 422, response.text
    assert response.json()["detail"]


@pytest.mark.parametrize(
    ("kind", "duration_s", "detail"),
    [
        ("short", 60.5, "duration_s must be at most 60 for a short job"),
        ("long", 3000.5, "duration_s must be at most 3000 for a long job"),
    ],
)
async def test_a_duration_over_the_kinds_limit_says_the_limit(
    api: Api, kind: str, duration_s: float, detail: str
) -> None:
    response = await enqueue(api, {"kind": kind, "duration_s": duration_s})

    assert response.status_code == 422
    assert response.json() == {"detail": detail}


async def test_a_validation_error_names_the_field(api: Api) -> None:
    response = await enqueue(api, {"kind": "short", "duration_s": 0})

    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "duration_s"]
    assert error["type"] == "greater_than"


# -- 413 ------------------------------------------------------------------------------------------
def oversized() -> bytes:
    padding = "x" * LIMIT
    return f'{{"kind": "short", "duration_s": 5, "padding": "{padding}"}}'.encode()


async def test_a_body_over_64_kib_with_its_length_is_413_and_writes_nothing(
    api: Api, r: redis.Redis
) -> None:
    await enqueue(api)
    with Untouched(r):
        response = await api.client.post(
            "/enqueue-task", content=oversized(), headers={**KEY, **JSON}
        )

    assert response.status_code == 413
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"detail": f"request body over {LIMIT} bytes"}


async def test_a_chunked_body_over_64_kib_is_413_and_writes_nothing(
    api: Api, r: redis.Redis
) -> None:
    body = oversized()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 8192):
            yield body[start : start + 8192]

    await enqueue(api)
    with Untouched(r):
        response = await api.client.post("/enqueue-task", content=chunks(), headers={**KEY, **JSON})

    assert "content-length" not in response.request.headers
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert response.status_code == 413, response.text
    assert response.json() == {"detail": f"request body over {LIMIT} bytes"}


async def test_a_body_of_exactly_64_kib_is_not_refused_for_its_size(api: Api) -> None:
    head = b'{"kind": "short", "duration_s": 5}'
    body = head + b" " * (LIMIT - len(head))

    response = await api.client.post("/enqueue-task", content=body, headers={**KEY, **JSON})

    assert response.status_code == 200, response.text


async def test_a_non_numeric_content_length_is_refused_and_writes_nothing(
    api: Api, r: redis.Redis
) -> None:
    with Untouched(r):
        response = await api.client.post(
            "/enqueue-task",
            content=b'{"kind": "short", "duration_s": 5}',
            headers={**KEY, **JSON, "content-length": "-1"},
        )

    assert response.status_code == 413
    assert response.json()["detail"]


async def test_a_team_account_enqueues_with_its_own_key(api: Api, r: redis.Redis) -> None:
    task_id = (await enqueue(api, key=TEAM_KEY)).json()["task_id"]

    assert r.hget(f"fairgpu:job:{task_id}", "owner") == TEAM.encode()
