"""Monthly budgets: a submit that the month's remaining budget cannot cover is a 402 that says
what is left, and writes nothing but the key's rate count; what unended jobs may cost is held
against the budget until they end; an admin may raise it live; an idempotent retry still gets
its first job."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from app.store.keys import job_key
from tests.api.conftest import Api
from tests.api.helpers import KEY, SECOND, SECOND_KEY, Worker

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): budgets and what they allow live
    in Redis and the database, both emptied for each test."""
    return shared_api


SHORT_5S = {"kind": "short", "duration_s": 5}


async def set_budget(api: Api, **budget: Any) -> None:
    response = await api.client.patch(f"/admin/accounts/{SECOND}", json=budget, headers=KEY)
    assert response.status_code == 200, response.text


async def submit(api: Api, body: dict[str, Any] = SHORT_5S, **headers: str) -> Any:
    return await api.client.post("/enqueue-task", json=body, headers={**SECOND_KEY, **headers})


async def month(api: Api) -> dict[str, Any]:
    response = await api.client.get("/account", headers=SECOND_KEY)
    assert response.status_code == 200, response.text
    used: dict[str, Any] = response.json()["month"]
    return used


def jobs(r: redis.Redis) -> int:
    return len(r.keys(job_key("*")))


async def test_a_job_the_budget_cannot_cover_is_refused_with_what_is_left(
    api: Api, r: redis.Redis
) -> None:
    await set_budget(api, budget_gpu_seconds=12)
    assert (await submit(api)).status_code == 200
    assert (await submit(api)).status_code == 200  # 10 of 12 s held now

    before = jobs(r)
    refused = await submit(api)
    assert refused.status_code == 402
    assert refused.json()["detail"] == (
        "this month's GPU-second budget has 2 GPU-seconds left (10 GPU-seconds held by jobs not "
        "ended yet); this job may use up to 5 GPU-seconds"
    )
    assert jobs(r) == before
    used = await month(api)
    assert (used["held_seconds"], used["billed_seconds"], used["left_gpu_seconds"]) == (10, 0, 2)
    # a smaller job still fits
    assert (await submit(api, {"kind": "short", "duration_s": 2})).status_code == 200


async def test_what_a_job_holds_is_given_back_when_it_ends_and_its_bill_counts_instead(
    api: Api, worker: Worker
) -> None:
    await set_budget(api, budget_gpu_seconds=10)
    first = (await submit(api)).json()["task_id"]
    second = (await submit(api, {"kind": "short", "duration_s": 3})).json()["task_id"]
    assert (await month(api))["held_seconds"] == 8

    worker.run(first)  # billed its 5 s
    used = await month(api)
    assert (used["billed_seconds"], used["held_seconds"], used["left_gpu_seconds"]) == (5, 3, 2)

    cancelled = await api.client.delete(f"/tasks/{second}", headers=SECOND_KEY)
    assert cancelled.status_code == 200  # queued: REVOKED, unbilled
    used = await month(api)
    assert (used["billed_seconds"], used["held_seconds"], used["left_gpu_seconds"]) == (5, 0, 5)
    assert (await submit(api)).status_code == 200
    assert (await submit(api, {"kind": "short", "duration_s": 1})).status_code == 402


async def test_a_cost_budget_counts_the_queues_prices(api: Api) -> None:
    # short: 0.5 a second, so a 5 s job may cost 2.5
    await set_budget(api, budget_cost=4.0)
    assert (await submit(api)).status_code == 200
    refused = await submit(api)
    assert refused.status_code == 402
    assert refused.json()["detail"] == (
        "this month's cost budget has 1.5 left (2.5 held by jobs not ended yet); this job may "
        "use up to 2.5"
    )
    used = await month(api)
    assert (used["budget_cost"], used["held_cost"], used["left_cost"]) == (4.0, 2.5, 1.5)


async def test_an_admin_raises_a_budget_live_and_the_next_submit_passes(api: Api) -> None:
    await set_budget(api, budget_gpu_seconds=4)
    assert (await submit(api)).status_code == 402
    await set_budget(api, budget_gpu_seconds=100)
    assert (await submit(api)).status_code == 200
    await set_budget(api, budget_gpu_seconds=None)  # no budget at all
    assert (await month(api))["budget_gpu_seconds"] is None
    assert (await submit(api, {"kind": "long", "duration_s": 3000})).status_code == 200


async def test_an_idempotent_retry_gets_its_first_job_whatever_the_budget_says(api: Api) -> None:
    await set_budget(api, budget_gpu_seconds=5)
    first = await submit(api, **{"Idempotency-Key": "once"})
    assert first.status_code == 200
    again = await submit(api, **{"Idempotency-Key": "once"})
    assert (again.status_code, again.json()["task_id"]) == (200, first.json()["task_id"])
    assert (await submit(api, **{"Idempotency-Key": "another"})).status_code == 402


async def test_an_account_without_a_budget_holds_nothing(api: Api) -> None:
    assert (await submit(api)).status_code == 200
    used = await month(api)
    assert (used["held_seconds"], used["left_gpu_seconds"], used["left_cost"]) == (0, None, None)
