"""Per-account and per-key limits: 429 with Retry-After, kept in Redis across API processes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from app.settings import Settings
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, SECOND_KEY

pytestmark = pytest.mark.anyio


@pytest.fixture
async def strict_api(settings: Settings) -> AsyncIterator[Api]:
    """An API that lets a key make 3 requests a second."""
    async with open_api(settings.model_copy(update={"rate_limit_per_s": 3})) as api:
        yield api


@pytest.fixture
async def small_api(settings: Settings) -> AsyncIterator[Api]:
    """An API that lets an account have 2 jobs queued in each queue."""
    async with open_api(settings.model_copy(update={"max_queued_per_account": 2})) as api:
        yield api


async def test_an_account_with_its_queue_full_gets_429_and_nothing_is_written(
    small_api: Api, r: redis.Redis
) -> None:

    body = {"kind": "long", "duration_s": 100}
    for _ in range(2):
        response = await small_api.client.post("/enqueue-task", json=body, headers=KEY)
        assert response.status_code == 200
    jobs = set(r.keys("fairgpu:job:*"))
    full = await small_api.client.post("/enqueue-task", json=body, headers=KEY)
    assert full.status_code == 429
    assert full.headers["retry-after"] == "30"
    assert full.json() == {"detail": "this account already has 2 jobs queued in long"}
    assert set(r.keys("fairgpu:job:*")) == jobs  # the refused job was never written
    assert r.zcard("vtrr:{long}:queue") == 2
    # The limit is per account and per queue.
    other = await small_api.client.post("/enqueue-task", json=body, headers=SECOND_KEY)
    assert other.status_code == 200
    short = await small_api.client.post(
        "/enqueue-task", json={"kind": "short", "duration_s": 1}, headers=KEY
    )
    assert short.status_code == 200


async def test_a_key_over_its_rate_gets_429_with_retry_after(strict_api: Api) -> None:
    answers = [
        (await strict_api.client.get("/billing-records", headers=KEY)).status_code for _ in range(8)
    ]
    # Three a second; eight requests may straddle a second boundary, so at most six pass.
    assert answers.count(429) >= 2
    assert set(answers) == {200, 429}
    refused = await strict_api.client.get("/billing-records", headers=KEY)
    if refused.status_code == 429:
        assert refused.headers["retry-after"] == "1"
        assert "requests a second" in refused.json()["detail"]


async def test_the_rate_is_counted_per_key(strict_api: Api) -> None:
    for _ in range(8):
        await strict_api.client.get("/billing-records", headers=KEY)
    other = await strict_api.client.get("/billing-records", headers=SECOND_KEY)
    assert other.status_code == 200
