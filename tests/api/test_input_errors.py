"""Requests a new or hostile user sent that deserved a clear 4xx, not a 500 or a misleading one:
an integer too large for a float, a body not declared JSON, an idempotent retry at the quota."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from app.settings import Settings
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, Untouched

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): a refused input changes
    nothing."""
    return shared_api


JOB = {"kind": "long", "duration_s": 100}


@pytest.mark.parametrize(
    "number",
    ["1" + "0" * 309, "-1" + "0" * 309, "9" * 400, "1" + "0" * 308 + ".5e1"],
    ids=["1e309 as an integer", "-1e309 as an integer", "400 nines", "1e309 as a decimal"],
)
async def test_a_number_past_a_float_s_range_is_a_422(
    api: Api, r: redis.Redis, number: str
) -> None:
    body = '{"kind": "short", "duration_s": ' + number + "}"
    with Untouched(r):
        response = await api.client.post(
            "/enqueue-task", content=body, headers={**KEY, "content-type": "application/json"}
        )
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "duration_s"]


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "application/jsonx"]
)
async def test_a_body_not_declared_json_is_a_422_that_names_the_content_type(
    api: Api, r: redis.Redis, content_type: str | None
) -> None:
    headers = {**KEY, **({"content-type": content_type} if content_type else {})}
    with Untouched(r):
        response = await api.client.post(
            "/enqueue-task", content=b'{"kind": "short", "duration_s": 1}', headers=headers
        )
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["header", "content-type"]
    assert "Content-Type: application/json" in error["msg"]
    assert (content_type or "none was given") in error["msg"]


@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "APPLICATION/JSON", "application/x+json"]
)
async def test_json_content_types_are_taken(api: Api, content_type: str) -> None:
    response = await api.client.post(
        "/enqueue-task",
        content=b'{"kind": "short", "duration_s": 1}',
        headers={**KEY, "content-type": content_type},
    )
    assert response.status_code == 200, response.text


async def test_a_request_without_a_key_is_401_whatever_its_content_type(api: Api) -> None:
    response = await api.client.post("/enqueue-task", content=b"x", headers={"content-type": "x"})
    assert response.status_code == 401


@pytest.fixture
async def quota_api(settings: Settings) -> AsyncIterator[Api]:
    async with open_api(settings.model_copy(update={"max_queued_per_account": 5})) as api:
        yield api


async def test_an_idempotent_retry_at_the_quota_gets_its_task_not_a_429(
    quota_api: Api, r: redis.Redis
) -> None:
    once = {**KEY, "Idempotency-Key": "first-of-five"}
    first = await quota_api.client.post("/enqueue-task", json=JOB, headers=once)
    assert first.status_code == 200
    for _ in range(4):
        assert (await quota_api.client.post("/enqueue-task", json=JOB, headers=KEY)).is_success
    jobs = set(r.keys("fairgpu:job:*"))

    retry = await quota_api.client.post("/enqueue-task", json=JOB, headers=once)

    assert retry.status_code == 200, retry.text
    assert retry.json()["task_id"] == first.json()["task_id"]
    assert set(r.keys("fairgpu:job:*")) == jobs
    # A new job is still refused: the quota holds for everything but the replay.
    assert (await quota_api.client.post("/enqueue-task", json=JOB, headers=KEY)).status_code == 429
