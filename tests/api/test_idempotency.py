"""Idempotency-Key on POST /enqueue-task: submit once, however often the request is sent."""

from __future__ import annotations

import asyncio

import pytest
import redis

from app.settings import Settings
from app.store.keys import job_key
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, SECOND_KEY, Untouched, contents

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): an idempotency key lives in
    Redis, emptied for each test."""
    return shared_api


BODY = {"kind": "short", "duration_s": 5}


def state(r: redis.Redis) -> dict[bytes, bytes | None]:
    """Everything in Redis but the rate counters."""
    return {k: v for k, v in contents(r).items() if not k.startswith(b"fairgpu:rate:")}


async def post(api: Api, key: str, body: object = BODY, who: dict[str, str] = KEY) -> object:
    return await api.client.post(
        "/enqueue-task", json=body, headers={**who, "Idempotency-Key": key}
    )


async def test_the_same_key_and_body_return_the_same_task(api: Api, r: redis.Redis) -> None:
    first = await post(api, "order-1")
    again = await post(api, "order-1")
    assert first.status_code == again.status_code == 200  # type: ignore[attr-defined]
    assert first.json() == again.json()  # type: ignore[attr-defined]
    assert r.zcard("vtrr:{short}:queue") == 1


async def test_the_same_key_with_another_body_is_a_422_that_writes_nothing(
    api: Api, r: redis.Redis
) -> None:
    await post(api, "order-2")
    before = state(r)
    response = await post(api, "order-2", body={"kind": "short", "duration_s": 6})
    assert state(r) == before  # the request was counted against the key's rate, nothing else
    assert response.status_code == 422  # type: ignore[attr-defined]
    assert response.json() == {  # type: ignore[attr-defined]
        "detail": "this Idempotency-Key was used with a different request"
    }


async def test_keys_belong_to_an_account(api: Api) -> None:
    mine = await post(api, "shared-name")
    theirs = await post(api, "shared-name", who=SECOND_KEY)
    assert mine.json()["task_id"] != theirs.json()["task_id"]  # type: ignore[attr-defined]


async def test_concurrent_requests_with_one_key_create_one_task(api: Api, r: redis.Redis) -> None:
    replies = await asyncio.gather(*(post(api, "burst") for _ in range(10)))
    assert {reply.status_code for reply in replies} == {200}  # type: ignore[attr-defined]
    assert len({reply.json()["task_id"] for reply in replies}) == 1  # type: ignore[attr-defined]
    assert r.zcard("vtrr:{short}:queue") == 1
    assert len(r.keys("fairgpu:job:*")) == 1


async def test_a_key_whose_job_is_gone_creates_a_new_one(api: Api, r: redis.Redis) -> None:
    first = (await post(api, "order-3")).json()["task_id"]  # type: ignore[attr-defined]
    r.delete(job_key(first))  # expired, or never queued
    second = (await post(api, "order-3")).json()["task_id"]  # type: ignore[attr-defined]
    assert second != first


async def test_a_replay_of_a_job_no_longer_queued_writes_and_queues_nothing(
    api: Api, r: redis.Redis
) -> None:
    task_id = (await post(api, "order-4")).json()["task_id"]  # type: ignore[attr-defined]
    cancelled = await api.client.delete(f"/tasks/{task_id}", headers=KEY)
    assert cancelled.status_code == 200  # REVOKED, and out of its queue
    before = state(r)
    assert (await post(api, "order-4")).json()["task_id"] == task_id  # type: ignore[attr-defined]
    assert state(r) == before
    assert r.zcard("vtrr:{short}:queue") == 0


async def test_a_replay_gets_its_job_even_with_the_account_s_queue_full(
    settings: Settings, r: redis.Redis
) -> None:
    async with open_api(settings.model_copy(update={"max_queued_per_account": 1})) as api:
        first = (await post(api, "order-5")).json()["task_id"]  # type: ignore[attr-defined]
        other = await post(api, "order-6")
        assert other.status_code == 429  # type: ignore[attr-defined]
        again = await post(api, "order-5")
        assert again.status_code == 200  # type: ignore[attr-defined]
        assert again.json()["task_id"] == first  # type: ignore[attr-defined]
    assert r.zcard("vtrr:{short}:queue") == 1
    assert r.keys("fairgpu:job:*") == [job_key(first).encode()]
    assert len(r.keys("fairgpu:idem:*")) == 1  # the refused request's key is not remembered


@pytest.mark.parametrize("key", [b"", b"x" * 256, b"has space", b"tab\there", "é".encode()])
async def test_a_malformed_key_is_a_422(api: Api, r: redis.Redis, key: bytes) -> None:
    with Untouched(r):
        response = await api.client.post(
            "/enqueue-task",
            json=BODY,
            headers=[(b"X-API-Key", b"default_api_key"), (b"Idempotency-Key", key)],
        )
    assert response.status_code == 422, response.text
