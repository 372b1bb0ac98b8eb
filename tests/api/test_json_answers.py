"""Every JSON answer is rendered by orjson (responses.OrjsonResponse, the app's default) in the
bytes it had before: those of Starlette's compact json.dumps for the error handlers' answers, and
of pydantic's JSON for the models'; with the same content-type."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import redis

from app.api.factory import create_app
from app.api.responses import OrjsonResponse
from app.models import TaskPage, TaskStatus
from app.settings import Settings
from tests.api.conftest import Api
from tests.api.helpers import KEY, USERS_FILE

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): the answers' bytes are what is
    under test, read from Redis emptied for each test."""
    return shared_api


def starlette_bytes(body: Any) -> bytes:
    """What Starlette's JSONResponse renders."""
    compact = json.dumps(
        body, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    )
    return compact.encode()


def assert_json_as_before(response: httpx.Response) -> None:
    assert response.headers["content-type"] == "application/json"
    assert response.content == starlette_bytes(response.json())
    assert response.headers["content-length"] == str(len(response.content))


def test_the_app_answers_json_with_orjson_by_default() -> None:
    app = create_app(Settings(users_file=USERS_FILE))
    assert app.router.default_response_class is OrjsonResponse


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "status"),
    [
        ("GET", "/account", {}, None, 401),
        ("GET", "/no-such-path", {}, None, 404),
        ("DELETE", "/account", KEY, None, 405),
        ("GET", "/task-status/not-a-uuid", KEY, None, 404),
        ("POST", "/enqueue-task", KEY, {"type": "café"}, 422),  # not ASCII: written as UTF-8
        ("POST", "/enqueue-task", KEY, {"kind": "short", "duration_s": -1}, 422),
        ("POST", "/enqueue-task", KEY, {"kind": "short", "duration_s": 61}, 422),
        ("GET", "/admin/queues", {"X-API-Key": "second_api_key"}, None, 404),
    ],
)
async def test_an_error_answer_has_the_bytes_of_starlettes_json(
    api: Api, method: str, path: str, headers: dict[str, str], body: Any, status: int
) -> None:
    response = await api.client.request(method, path, headers=headers, json=body)
    assert response.status_code == status, response.text
    assert_json_as_before(response)


async def test_a_model_answer_has_the_bytes_of_pydantics_json(api: Api) -> None:
    submitted = await api.client.post(
        "/enqueue-task", json={"kind": "long", "duration_s": 120.5}, headers=KEY
    )
    task_id = submitted.json()["task_id"]
    for path, model in ((f"/task-status/{task_id}", TaskStatus), ("/tasks", TaskPage)):
        response = await api.client.get(path, headers=KEY)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/json"
        # What FastAPI wrote before, with pydantic's own JSON of the model.
        assert model.model_validate_json(response.content).model_dump_json() == response.text


async def test_a_body_over_the_limit_is_refused_in_the_same_bytes(api: Api) -> None:
    response = await api.client.post(
        "/enqueue-task",
        content=b"x" * (64 * 1024 + 1),
        headers={**KEY, "content-type": "application/json"},
    )
    assert response.status_code == 413
    assert response.content == b'{"detail": "request body over 65536 bytes"}'
    assert response.headers["content-type"] == "application/json"


async def test_a_redis_failure_is_answered_in_the_same_bytes(api: Api, r: redis.Redis) -> None:
    task_id = "0b7d2f6e-0000-4000-8000-000000000001"
    r.set(f"fairgpu:job:{task_id}", "not a hash")
    response = await api.client.get(f"/task-status/{task_id}", headers=KEY)
    assert response.status_code == 500
    assert_json_as_before(response)
