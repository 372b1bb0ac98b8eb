"""POST /enqueue-task with a job type: {"type", "input"} and optionally "duration_s" and "kind".
Defaults and limits come from the type and its queue; an unknown or unavailable type, or an input
its type refuses, is a 422 naming the field, and writes nothing."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import redis

from app.settings import Settings
from app.store.keys import input_key, job_key
from tests.api.conftest import Api
from tests.api.helpers import KEY, Untouched, Worker
from tests.api.typed_jobs import ECHO, ECHO_MAX_S, MISSING, with_these_types

pytestmark = pytest.mark.anyio
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def module_settings(module_settings: Settings) -> Settings:
    return with_these_types(module_settings)


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py), with typed_jobs's job types: a
    submit's answer and what it writes live in Redis, emptied for each test."""
    return shared_api


async def post(api: Api, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return await api.client.post("/enqueue-task", json=body, headers={**KEY, **(headers or {})})


async def submitted(api: Api, body: Any, headers: dict[str, str] | None = None) -> str:
    response = await post(api, body, headers)
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


def job_of(r: redis.Redis, task_id: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in r.hgetall(job_key(task_id)).items()}


# -- accepted -------------------------------------------------------------------------------------
async def test_a_typed_job_takes_its_types_queue_and_longest_budget(
    api: Api, r: redis.Redis, worker: Worker
) -> None:
    task_id = await submitted(api, {"type": ECHO, "input": {"text": "hi"}})

    job = job_of(r, task_id)
    assert (job["type"], job["kind"], float(job["duration_s"])) == (ECHO, "long", ECHO_MAX_S)
    assert "input" not in job  # kept apart: the hash is copied into every event
    assert r.get(input_key(task_id)) == b'{"text":"hi"}'
    assert r.ttl(input_key(task_id)) > 0
    assert worker.service.queues["long"].position(task_id) == 0


async def test_a_typed_job_may_ask_for_less_time_and_another_queue(
    api: Api, r: redis.Redis
) -> None:
    task_id = await submitted(
        api, {"type": ECHO, "input": {"text": "hi"}, "duration_s": 2.5, "kind": "short"}
    )

    job = job_of(r, task_id)
    assert (job["kind"], float(job["duration_s"])) == ("short", 2.5)


async def test_the_input_is_kept_as_canonical_json(api: Api, r: redis.Redis) -> None:
    body = {"type": ECHO, "input": {"text": "é", "points": [{"y": 2, "x": 1}]}}
    task_id = await submitted(api, body)

    kept = r.get(input_key(task_id))
    assert kept == '{"points":[{"x":1,"y":2}],"text":"é"}'.encode()


async def test_burn_by_name_is_the_original_body_s_job(api: Api, r: redis.Redis) -> None:
    by_name = await submitted(api, {"type": "burn"})
    original = await submitted(api, {"kind": "short", "duration_s": 5})

    # The queue's limit is below burn's own: it is the default, and the bound.
    assert job_of(r, by_name)["type"] == job_of(r, original)["type"] == "burn"
    assert float(job_of(r, by_name)["duration_s"]) == 60
    assert r.get(input_key(by_name)) == r.get(input_key(original)) == b"{}"
    over = await post(api, {"type": "burn", "duration_s": 61})
    assert over.json() == {"detail": "duration_s must be at most 60 for a short job"}


async def test_a_null_duration_or_kind_means_the_types_own(api: Api, r: redis.Redis) -> None:
    task_id = await submitted(
        api, {"type": ECHO, "input": {"text": ""}, "duration_s": None, "kind": None}
    )

    job = job_of(r, task_id)
    assert (job["kind"], float(job["duration_s"])) == ("long", ECHO_MAX_S)


# -- refused, and nothing written -----------------------------------------------------------------
async def refused(api: Api, r: redis.Redis, body: Any) -> list[dict[str, Any]]:
    """The 422 a body gets, checked to have written nothing; its detail."""
    await submitted(api, {"kind": "short", "duration_s": 1})  # something a write would change
    raw = body if isinstance(body, str) else json.dumps(body)
    with Untouched(r):
        response = await api.client.post("/enqueue-task", content=raw, headers={**KEY, **JSON})
        assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/json"
    detail: list[dict[str, Any]] = response.json()["detail"]
    return detail


async def test_an_unknown_type_is_a_422_naming_type(api: Api, r: redis.Redis) -> None:
    [error] = await refused(api, r, {"type": "no-such-type", "input": {}})

    assert error["loc"] == ["body", "type"]
    assert "no-such-type" not in error["msg"]  # a 422 never says the input back
    assert "GET /job-types" in error["msg"]


async def test_an_unavailable_type_is_a_422_saying_why(api: Api, r: redis.Redis) -> None:
    [error] = await refused(api, r, {"type": MISSING, "input": {"text": "hi"}})

    assert error["loc"] == ["body", "type"]
    assert "fairgpu_no_such_package" in error["msg"]


@pytest.mark.parametrize(
    ("job_input", "loc", "kind"),
    [
        ({"text": "hi", "points": [{"x": 1, "y": 2}, {"x": 1}]}, ["points", 1, "y"], "missing"),
        ({"text": "hi", "points": [{"x": 1, "y": "two"}]}, ["points", 0, "y"], "int_type"),
        ({}, ["text"], "missing"),
        ({"text": "hi", "colour": "red"}, ["colour"], "extra_forbidden"),
    ],
    ids=["missing-nested", "wrong-nested", "missing", "extra"],
)
async def test_an_input_its_type_refuses_is_a_422_naming_the_field(
    api: Api, r: redis.Redis, job_input: dict[str, Any], loc: list[Any], kind: str
) -> None:
    [error] = await refused(api, r, {"type": ECHO, "input": job_input})

    assert error["loc"] == ["body", "input", *loc]
    assert error["type"] == kind
    assert set(error) == {"type", "loc", "msg"}  # the input is never echoed back


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"type": ECHO, "input": {"text": "hi"}, "priority": 9}, ["body", "priority"]),
        ({"type": ECHO, "input": "hi"}, ["body", "input"]),
        ({"type": ECHO, "input": [{"text": "hi"}]}, ["body", "input"]),
        ({"type": 7, "input": {}}, ["body", "type"]),
        ({"type": "", "input": {}}, ["body", "type"]),
        ({"type": ECHO, "input": {"text": "hi"}, "kind": "medium"}, ["body", "kind"]),
        ({"type": ECHO, "input": {"text": "hi"}, "duration_s": 0}, ["body", "duration_s"]),
        ({"type": ECHO, "input": {"text": "hi"}, "duration_s": "5"}, ["body", "duration_s"]),
        ({"type": ECHO, "input": {"text": "hi"}, "duration_s": True}, ["body", "duration_s"]),
    ],
    ids=[
        "extra-field",
        "input-string",
        "input-list",
        "type-number",
        "type-empty",
        "unknown-kind",
        "zero-duration",
        "string-duration",
        "bool-duration",
    ],
)
async def test_a_malformed_typed_body_is_a_422_naming_the_field(
    api: Api, r: redis.Redis, body: dict[str, Any], loc: list[str]
) -> None:
    errors = await refused(api, r, body)

    assert [e["loc"] for e in errors] == [loc]


async def test_a_non_finite_number_in_the_input_is_a_422(api: Api, r: redis.Redis) -> None:
    body = '{"type": "test-echo", "input": {"text": "hi", "points": [{"x": NaN, "y": 1}]}}'
    [error] = await refused(api, r, body)

    assert error["loc"] == ["body", "input"]


async def test_a_duration_over_the_types_budget_says_its_limit(api: Api, r: redis.Redis) -> None:
    await submitted(api, {"type": ECHO, "input": {"text": "hi"}, "duration_s": ECHO_MAX_S})
    with Untouched(r):
        response = await post(api, {"type": ECHO, "input": {"text": "hi"}, "duration_s": 10.5})

    assert response.status_code == 422
    assert response.json() == {
        "detail": "duration_s must be at most 10 for a job of type test-echo"
    }


async def test_an_original_body_with_a_typed_field_is_read_as_a_typed_one(api: Api) -> None:
    """Only the typed body has `input`; with `type` the rest of the original body is allowed."""
    response = await post(api, {"kind": "short", "duration_s": 5, "input": {}})

    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "input"]
    assert error["type"] == "extra_forbidden"


# -- Idempotency-Key ------------------------------------------------------------------------------
async def test_a_typed_retry_with_the_same_key_gets_the_same_job(api: Api, r: redis.Redis) -> None:
    once = {"Idempotency-Key": "echo-1"}
    first = await submitted(api, {"type": ECHO, "input": {"text": "a", "points": []}}, once)
    # the same input with its keys in another order is the same request
    again = await submitted(api, {"input": {"points": [], "text": "a"}, "type": ECHO}, once)

    assert again == first
    assert len(r.keys("fairgpu:job:*")) == 1


@pytest.mark.parametrize(
    "other",
    [
        {"type": ECHO, "input": {"text": "b"}},
        {"type": ECHO, "input": {"text": "a"}, "duration_s": 5},
        {"type": ECHO, "input": {"text": "a"}, "kind": "short"},
        {"type": "burn"},
    ],
    ids=["input", "duration", "kind", "type"],
)
async def test_the_same_key_with_another_typed_request_is_a_422(
    api: Api, r: redis.Redis, other: dict[str, Any]
) -> None:
    once = {"Idempotency-Key": "echo-2"}
    await submitted(api, {"type": ECHO, "input": {"text": "a"}}, once)

    response = await post(api, other, once)
    assert response.status_code == 422
    assert response.json() == {"detail": "this Idempotency-Key was used with a different request"}
    assert len(r.keys("fairgpu:job:*")) == 1


async def test_both_spellings_of_a_burn_job_are_one_request(api: Api) -> None:
    once = {"Idempotency-Key": "burn-1"}
    original = await submitted(api, {"kind": "long", "duration_s": 100}, once)
    by_name = await submitted(api, {"type": "burn", "kind": "long", "duration_s": 100}, once)

    assert by_name == original
