"""DELETE /tasks/{task_id}: the owner cancels a queued, running or ended job."""

from __future__ import annotations

import pytest
import redis

from app import pricing
from app.models import Status
from tests.api.conftest import Api
from tests.api.helpers import KEY, SECOND_KEY, Worker
from tests.support import bills_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): a cancel changes only Redis,
    emptied for each test."""
    return shared_api


OWNER = "11111111-1111-1111-1111-111111111111"


async def submit(api: Api, kind: str = "short", duration_s: float = 5) -> str:
    response = await api.client.post(
        "/enqueue-task", json={"kind": kind, "duration_s": duration_s}, headers=KEY
    )
    assert response.status_code == 200, response.text
    return str(response.json()["task_id"])


async def test_a_queued_job_is_revoked_unbilled_and_leaves_its_queue(
    api: Api, r: redis.Redis
) -> None:
    task_id = await submit(api)
    response = await api.client.delete(f"/tasks/{task_id}", headers=KEY)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "REVOKED"
    assert r.zcard("vtrr:{short}:queue") == 0
    status = await api.client.get(f"/task-status/{task_id}", headers=KEY)
    assert status.json()["status"] == "REVOKED"
    assert len(bills_of(r, OWNER)) == 0


async def test_a_running_job_is_asked_to_stop(api: Api, worker: Worker, r: redis.Redis) -> None:
    task_id = await submit(api)
    worker.start(task_id, worker.lease())
    response = await api.client.delete(f"/tasks/{task_id}", headers=KEY)
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "STARTED"
    assert response.json()["cancel_requested"] is True
    assert r.hexists(f"fairgpu:job:{task_id}", "cancel")


async def test_a_cancelled_jobs_final_status_still_says_a_stop_was_asked(
    api: Api, worker: Worker
) -> None:
    task_id = await submit(api)
    token = worker.lease()
    worker.start(task_id, token)
    assert (await api.client.delete(f"/tasks/{task_id}", headers=KEY)).status_code == 202
    charge = pricing.price(api.runtime.settings, "short", 0.4, end="cancelled")
    assert worker.recorder.finish(task_id, token, Status.REVOKED, charge=charge, owner=OWNER)
    final = (await api.client.get(f"/task-status/{task_id}", headers=KEY)).json()
    assert (final["status"], final["cancel_requested"]) == ("REVOKED", True)


async def test_an_ended_job_cannot_be_cancelled(api: Api, worker: Worker) -> None:
    task_id = await submit(api)
    worker.run(task_id)
    response = await api.client.delete(f"/tasks/{task_id}", headers=KEY)
    assert response.status_code == 409
    assert response.json() == {"detail": "the task has already ended: SUCCESS"}


async def test_cancelling_twice_is_a_conflict_the_second_time(api: Api) -> None:
    task_id = await submit(api)
    assert (await api.client.delete(f"/tasks/{task_id}", headers=KEY)).status_code == 200
    again = await api.client.delete(f"/tasks/{task_id}", headers=KEY)
    assert (again.status_code, again.json()) == (
        409,
        {"detail": "the task has already ended: REVOKED"},
    )


async def test_another_account_cannot_cancel_and_gets_the_same_404(
    api: Api, r: redis.Redis
) -> None:
    task_id = await submit(api)
    response = await api.client.delete(f"/tasks/{task_id}", headers=SECOND_KEY)
    assert (response.status_code, response.json()) == (404, {"detail": "task not found"})
    status = await api.client.get(f"/task-status/{task_id}", headers=KEY)
    assert status.json()["status"] == "PENDING"


async def test_cancel_needs_a_key(api: Api) -> None:
    task_id = await submit(api)
    response = await api.client.delete(f"/tasks/{task_id}")
    assert response.status_code == 401
