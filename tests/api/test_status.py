"""GET /task-status/{task_id}: the owner's account sees the job through its life; anybody else,
and any id that is not a job's, gets the same 404, the malformed ones without touching Redis."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest
import redis

from app.models import Status
from tests.api.conftest import Api
from tests.api.helpers import (
    KEY,
    NOT_FOUND,
    OWNER,
    SECOND,
    SECOND_KEY,
    SECOND_KEY_V2,
    TEAM_KEY,
    UNAUTHORIZED,
    Untouched,
    Worker,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): a job's status is read from
    Redis, emptied for each test."""
    return shared_api


async def submit(
    api: Api, kind: str = "short", duration_s: float = 5, key: dict[str, str] = KEY
) -> str:
    response = await api.client.post(
        "/enqueue-task", json={"kind": kind, "duration_s": duration_s}, headers=key
    )
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


async def status(api: Api, task_id: str, key: dict[str, str] = KEY) -> httpx.Response:
    return await api.client.get(f"/task-status/{task_id}", headers=key)


async def body_of(api: Api, task_id: str, key: dict[str, str] = KEY) -> dict[str, Any]:
    response = await status(api, task_id, key)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# -- the owner's view -----------------------------------------------------------------------------
async def test_a_queued_job_is_pending_at_position_zero_with_no_attempts(api: Api) -> None:
    before = time.time()
    task_id = await submit(api, duration_s=7.5)

    body = await body_of(api, task_id)
    assert before - 1 <= body.pop("enqueued_at") <= time.time() + 1  # Redis's clock, same host
    assert body == {
        "task_id": task_id,
        "status": "PENDING",
        "result": None,
        "kind": "short",
        "gpus": 1,
        "attempts": 0,
        "preemptions": 0,
        "runs": 0,
        "ran_s": 0.0,
        "position": 0,
        "waiting_for": "gpu",
        "reservation": None,  # a job of one card holds none
        "estimated_start_at": None,  # no worker serves the queue
        "error": None,
        "cancel_requested": False,
        "type": "burn",  # the original body is a job of the built-in type burn
        "error_kind": None,
        "progress": None,  # none reported
    }


async def test_positions_count_in_fair_order_within_each_queue(api: Api) -> None:
    first = await submit(api)
    second = await submit(api)
    others = await submit(api, key=SECOND_KEY)
    long = await submit(api, kind="long", duration_s=100)

    # The other account's job goes ahead of the first account's second one: fair, not arrival.
    assert (await body_of(api, first))["position"] == 0
    assert (await body_of(api, others, SECOND_KEY))["position"] == 1
    assert (await body_of(api, second))["position"] == 2
    assert (await body_of(api, long))["position"] == 0  # the long queue has its own line


async def test_a_started_job_shows_its_attempt_worker_and_start(api: Api, worker: Worker) -> None:
    task_id = await submit(api)
    job = await api.runtime.store.get(task_id)
    assert job is not None
    enqueued_at = job.enqueued_at
    worker.start(task_id, worker.lease(), gpu_id=3)

    body = await body_of(api, task_id)

    assert body["status"] == "STARTED"
    assert body["attempts"] == 1
    assert body["position"] is None
    assert body["error"] is None
    result = body["result"]
    assert result["worker"] == worker.name
    assert result["gpu_id"] == 3
    assert result["duration_s"] == 5
    assert result["enqueued_at"] == float(enqueued_at)
    assert result["started_at"] >= result["enqueued_at"]
    assert result["finished_at"] is None


async def test_a_successful_job_reports_its_run(api: Api, worker: Worker) -> None:
    task_id = await submit(api, duration_s=12.25)
    token = worker.lease()
    worker.start(task_id, token, gpu_id=0)
    assert worker.succeed(task_id, token)

    body = await body_of(api, task_id)

    assert body["status"] == "SUCCESS"
    assert body["attempts"] == 1
    assert body["position"] is None
    assert body["error"] is None
    result = body["result"]
    assert {"worker", "gpu_id", "duration_s", "enqueued_at", "started_at", "finished_at"} <= set(
        result
    )
    assert result["worker"] == worker.name
    assert result["gpu_id"] == 0
    assert result["duration_s"] == 12.25
    assert result["enqueued_at"] <= result["started_at"] <= result["finished_at"]


async def test_a_job_run_without_a_gpu_reports_a_null_gpu_id(api: Api, worker: Worker) -> None:
    task_id = await submit(api)
    token = worker.lease()
    worker.start(task_id, token, gpu_id=None)
    worker.succeed(task_id, token)

    assert (await body_of(api, task_id))["result"]["gpu_id"] is None


async def test_a_failed_job_carries_its_error(api: Api, worker: Worker) -> None:
    task_id = await submit(api)
    token = worker.lease()
    worker.start(task_id, token)
    assert worker.fail(task_id, token, "RuntimeError: CUDA out of memory")

    body = await body_of(api, task_id)

    assert body["status"] == "FAILURE"
    assert body["error"] == "RuntimeError: CUDA out of memory"
    assert body["result"]["finished_at"] >= body["result"]["started_at"]


async def test_a_rerun_after_a_lost_worker_counts_a_second_attempt(
    api: Api, worker: Worker
) -> None:
    task_id = await submit(api)
    worker.start(task_id, "lease-of-the-lost-worker")
    worker.start(task_id, "lease-of-the-rerun")

    body = await body_of(api, task_id)

    assert body["status"] == "STARTED"
    assert body["attempts"] == 2


async def test_a_job_waiting_after_a_preemption_shows_the_run_it_had(
    api: Api, worker: Worker
) -> None:
    """Its run is an attempt and a run of its bill, with the seconds it ran (not attempts 0
    beside a bill for 5 s); once resumed and ended, both runs and all their seconds."""
    task_id = await submit(api, duration_s=30)
    token = worker.lease()
    worker.start(task_id, token)
    assert worker.recorder.preempted(task_id, token, 5.0, worker.charge("short", 5.0))
    body = await body_of(api, task_id)
    assert body["status"] == "PENDING"
    assert (body["attempts"], body["preemptions"], body["runs"], body["ran_s"]) == (1, 1, 1, 5.0)
    again = "lease-of-the-resumed-run"  # (the job store's side alone: the queue's is vtrr's)
    worker.start(task_id, again)
    running = await body_of(api, task_id)
    assert (running["attempts"], running["runs"], running["ran_s"]) == (2, 2, 5.0)
    charge = worker.charge("short", 5.0 + 3.5)
    assert worker.recorder.finish(
        task_id, again, Status.SUCCESS, charge=charge, owner=OWNER, seconds=3.5
    )
    ended = await body_of(api, task_id)
    assert (ended["attempts"], ended["runs"], ended["ran_s"]) == (2, 2, 8.5)
    assert ended["ran_s"] == charge.gpu_seconds  # what the bill counts


# -- ownership: the account, not the key ----------------------------------------------------------
async def test_every_key_of_an_account_sees_its_jobs(api: Api, r: redis.Redis) -> None:
    task_id = await submit(api, key=SECOND_KEY_V2)

    assert r.hget(f"fairgpu:job:{task_id}", "owner") == SECOND.encode()
    assert (await body_of(api, task_id, SECOND_KEY))["status"] == "PENDING"
    assert (await body_of(api, task_id, SECOND_KEY_V2))["status"] == "PENDING"


@pytest.mark.parametrize(
    "key", [SECOND_KEY, SECOND_KEY_V2, TEAM_KEY], ids=["second", "second-v2", "team"]
)
async def test_another_accounts_job_is_the_same_404_as_an_unknown_id(
    api: Api, key: dict[str, str]
) -> None:
    task_id = await submit(api)

    theirs = await status(api, task_id, key)
    unknown = await status(api, str(uuid.uuid4()), key)

    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json() == unknown.json() == NOT_FOUND
    assert theirs.headers == unknown.headers


async def test_a_finished_job_stays_hidden_from_other_accounts(api: Api, worker: Worker) -> None:
    task_id = await submit(api)
    worker.run(task_id)

    response = await status(api, task_id, SECOND_KEY)

    assert response.status_code == 404
    assert response.json() == NOT_FOUND


# -- ids that are not a job's ---------------------------------------------------------------------
MALFORMED_IDS = {
    "not-a-uuid": "hello",
    "uppercase-uuid": "9F1A4E1C-3B3A-4C8E-9D5B-2E7F0A1B2C3D",
    "braced-uuid": "{9f1a4e1c-3b3a-4c8e-9d5b-2e7f0a1b2c3d}",
    "hex-uuid": "9f1a4e1c3b3a4c8e9d5b2e7f0a1b2c3d",
    "urn-uuid": "urn:uuid:9f1a4e1c-3b3a-4c8e-9d5b-2e7f0a1b2c3d",
    "star": "*",
    "glob": "9f1a4e1c-*",
    "space": "%20",
    "10-kb": "a" * 10_000,
}


@pytest.mark.parametrize("task_id", MALFORMED_IDS.values(), ids=MALFORMED_IDS.keys())
async def test_a_malformed_id_is_the_same_404_without_touching_redis(
    api: Api, r: redis.Redis, task_id: str
) -> None:
    await submit(api)
    with Untouched(r):
        response = await status(api, task_id)

    assert response.status_code == 404
    assert response.json() == NOT_FOUND


async def test_an_uppercased_id_of_an_own_job_is_not_found(api: Api) -> None:
    task_id = await submit(api)

    response = await status(api, task_id.upper())

    assert response.status_code == 404
    assert response.json() == NOT_FOUND


async def test_status_needs_a_key(api: Api) -> None:
    task_id = await submit(api)

    for headers in ({}, {"X-API-Key": "nope"}):
        response = await status(api, task_id, headers)
        assert response.status_code == 401
        assert response.json() == UNAUTHORIZED
        assert response.headers["www-authenticate"] == "ApiKey"
