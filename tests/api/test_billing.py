"""GET /billing-records: the caller's account's charges, newest first, each job billed once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.models import Status
from tests.api.conftest import Api
from tests.api.helpers import (
    KEY,
    OWNER,
    SECOND_KEY,
    SECOND_KEY_V2,
    TEAM_KEY,
    UNAUTHORIZED,
    Worker,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): bills live in Redis and the
    database, both emptied for each test."""
    return shared_api


async def submit(api: Api, kind: str = "short", duration_s: float = 5, key: Any = KEY) -> str:
    response = await api.client.post(
        "/enqueue-task", json={"kind": kind, "duration_s": duration_s}, headers=key
    )
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


async def records(api: Api, key: dict[str, str] = KEY, query: str = "") -> list[dict[str, Any]]:
    response = await api.client.get(f"/billing-records{query}", headers=key)
    assert response.status_code == 200, response.text
    body: list[dict[str, Any]] = response.json()
    return body


@pytest.mark.parametrize("key", [KEY, SECOND_KEY, TEAM_KEY], ids=["default", "second", "team"])
async def test_a_new_account_has_no_records(api: Api, key: dict[str, str]) -> None:
    assert await records(api, key) == []


async def test_a_queued_or_running_job_is_not_billed(api: Api, worker: Worker) -> None:
    task_id = await submit(api)
    assert await records(api) == []

    worker.start(task_id, worker.lease())
    assert await records(api) == []


async def test_a_successful_job_is_billed_once_to_its_owner(api: Api, worker: Worker) -> None:
    task_id = await submit(api, duration_s=12.5)
    await asyncio.to_thread(worker.run, task_id)

    [record] = await records(api)
    expected = worker.charge("short", 12.5)
    assert {"user_id", "task_id", "cost", "description"} <= set(record)
    assert record["user_id"] == OWNER
    assert record["task_id"] == task_id
    assert record["cost"] == expected.cost == 6.25
    assert record["description"] == expected.description == "Short GPU job"
    assert record["kind"] == "short"
    assert record["gpu_seconds"] == record["billed_seconds"] == 12.5
    assert record["cost_micros"] == 6_250_000
    job = await api.runtime.store.get(task_id) or {}
    # billed when it finished (cjson writes 14 significant digits: 0.1 ms at today's epoch)
    assert record["billed_at"] == pytest.approx(job.finished_at, abs=1e-3)


async def test_a_long_job_is_billed_at_the_long_rate(api: Api, worker: Worker) -> None:
    task_id = await submit(api, kind="long", duration_s=100)
    await asyncio.to_thread(worker.run, task_id, "long")

    [record] = await records(api)
    assert record["cost"] == worker.charge("long", 100).cost == 25.0
    assert record["description"] == "Long GPU job"


async def test_other_accounts_see_none_of_the_owners_records(api: Api, worker: Worker) -> None:
    task_id = await submit(api)
    await asyncio.to_thread(worker.run, task_id)

    assert await records(api, SECOND_KEY) == []
    assert await records(api, TEAM_KEY) == []


async def test_every_key_of_an_account_sees_its_records(api: Api, worker: Worker) -> None:
    task_id = await submit(api, key=SECOND_KEY)
    await asyncio.to_thread(worker.run, task_id)

    first, second = await records(api, SECOND_KEY), await records(api, SECOND_KEY_V2)
    assert first == second
    assert [r["task_id"] for r in first] == [task_id]
    assert await records(api, KEY) == []


async def test_a_failed_run_is_billed_for_what_it_ran_when_charged(
    api: Api, worker: Worker
) -> None:
    """A run that held the GPU pays for it whatever its end: the worker charges a failure too."""
    task_id = await submit(api)
    token = worker.lease()
    worker.start(task_id, token)
    charge = worker.charge("short", 2.5)
    assert worker.recorder.finish(
        task_id, token, Status.FAILURE, charge=charge, owner=OWNER, error="RuntimeError: no"
    )

    [record] = await records(api)
    assert record["task_id"] == task_id
    assert record["cost_micros"] == 1_250_000  # 2.5 s at 0.5 a second
    assert record["gpu_seconds"] == 2.5


async def test_a_run_ended_without_a_charge_is_not_billed(api: Api, worker: Worker) -> None:
    """The worker gives no charge for a run it does not bill (lost, or stopped by an operator)."""
    task_id = await submit(api)
    token = worker.lease()
    worker.start(task_id, token)
    assert worker.recorder.finish(
        task_id, token, Status.FAILURE, charge=None, owner=OWNER, error="RuntimeError: no"
    )

    assert await records(api) == []


async def test_finishing_twice_with_the_same_token_bills_once(api: Api, worker: Worker) -> None:
    task_id = await submit(api)
    token = worker.run(task_id)

    assert not worker.succeed(task_id, token)
    assert len(await records(api)) == 1


async def test_a_stale_run_finishing_after_the_rerun_does_not_bill_again(
    api: Api, worker: Worker
) -> None:
    task_id = await submit(api)
    lost = worker.lease()
    worker.start(task_id, lost)
    worker.start(task_id, "token-of-the-rerun")  # the lease was reclaimed and run again
    assert worker.succeed(task_id, "token-of-the-rerun")

    assert not worker.succeed(task_id, lost)
    assert not worker.fail(task_id, lost, "late")
    [record] = await records(api)
    assert record["task_id"] == task_id
    status = (await api.client.get(f"/task-status/{task_id}", headers=KEY)).json()
    assert status["status"] == "SUCCESS"


async def test_records_come_newest_first_and_limit_keeps_the_newest(
    api: Api, worker: Worker
) -> None:
    older = await submit(api)
    await asyncio.to_thread(worker.run, older)
    newer = await submit(api)
    await asyncio.to_thread(worker.run, newer)

    assert [r["task_id"] for r in await records(api)] == [newer, older]
    assert [r["task_id"] for r in await records(api, query="?limit=1")] == [newer]
    assert [r["task_id"] for r in await records(api, query="?limit=1000")] == [newer, older]


@pytest.mark.parametrize("limit", ["0", "-1", "1001", "x", "1.5", ""])
async def test_a_limit_outside_1_to_1000_is_422(api: Api, limit: str) -> None:
    response = await api.client.get(f"/billing-records?limit={limit}", headers=KEY)

    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["query", "limit"]


async def test_billing_records_need_a_key(api: Api) -> None:
    for headers in ({}, {"X-API-Key": "bad"}):
        response = await api.client.get("/billing-records", headers=headers)
        assert response.status_code == 401
        assert response.json() == UNAUTHORIZED
        assert response.headers["www-authenticate"] == "ApiKey"
