"""Who pays for an interrupted run (issue 12, item 15): a run its owner cancels is billed for
the seconds it ran; a run an operator interrupts (a dropped queue, a released lease) is not, and
a released job's rerun is billed once. The real API and the real job runner, on the suite's
Redis; the job type `held` stands in for the GPU and runs until it is told to stop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from pydantic import BaseModel

from app.auth import Accounts
from app.jobs import JobContext, Registry, job
from app.settings import Settings
from app.wiring.service import Service
from app.worker.inline import InlineExecutor
from app.worker.runner import JobRunner, build_worker
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, USERS_FILE
from tests.support import wait_for

pytestmark = pytest.mark.anyio
ADMIN = KEY  # the demo account is an admin, and owns the jobs too


@dataclass
class Gpu:
    """What the job type `held` does: run until told to stop, or, once `finish` is set, end as
    a success; `runs` counts the runs it was given."""

    finish: threading.Event = field(default_factory=threading.Event)
    runs: int = 0


GPU = [Gpu()]


class Nothing(BaseModel):
    """No input, no output."""


@job(name="held", max_duration_s=30)
def held(ctx: JobContext, inp: Nothing) -> Nothing:
    gpu = GPU[0]
    gpu.runs += 1
    wait_for(lambda: ctx.cancelled or gpu.finish.is_set(), 30, "a stop")
    ctx.check_cancelled()
    return Nothing()


@pytest.fixture
def settings(redis_url: str) -> Settings:
    # a quick heartbeat, so that a run whose lease was taken back notices it at once
    return Settings(
        redis_url=redis_url, users_file=USERS_FILE, lease_seconds=3, heartbeat_seconds=0.1
    )


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    async with open_api(settings) as opened:
        yield opened


@pytest.fixture
def workload() -> Gpu:
    GPU[0] = Gpu()
    return GPU[0]


@pytest.fixture
def worker(settings: Settings, workload: Gpu) -> Iterator[tuple[Service, JobRunner]]:
    # every job of these tests, submitted as {"kind", "duration_s"}, is a burn job: run `held`
    # in its place, in this process
    executor = InlineExecutor(Registry([replace(held, name="burn")]))
    service, runner = build_worker(settings, Accounts.load(USERS_FILE), executor=executor)
    yield service, runner
    service.close()


async def submit(api: Api, duration_s: float = 30) -> str:
    body = {"kind": "short", "duration_s": duration_s}
    response = await api.client.post("/enqueue-task", json=body, headers=KEY)
    assert response.status_code == 200, response.text
    return str(response.json()["task_id"])


async def start(
    worker: tuple[Service, JobRunner], workload: Gpu, task_id: str
) -> asyncio.Task[str]:
    """Lease the job and run it in a thread, as a worker's task does; returns once it runs."""
    service, runner = worker
    runs = workload.runs
    lease = service.queues["short"].dequeue()
    assert lease is not None and lease.task_id == task_id
    run = asyncio.create_task(asyncio.to_thread(runner.run, "short", task_id, lease.token))
    await asyncio.to_thread(wait_for, lambda: workload.runs > runs, 10, "the run to start")
    return run


def assert_billed_for_what_it_ran(bill: dict[str, Any]) -> None:
    """Billed the seconds it ran at the short price (0.5), at least the 1 s floor."""
    assert 0 < bill["gpu_seconds"] < 4
    assert bill["billed_seconds"] == max(1.0, bill["gpu_seconds"])
    assert bill["cost"] == pytest.approx(0.5 * bill["billed_seconds"])


async def status(api: Api, task_id: str) -> dict[str, Any]:
    response = await api.client.get(f"/task-status/{task_id}", headers=KEY)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def bills(api: Api) -> list[dict[str, Any]]:
    response = await api.client.get("/billing-records", headers=KEY)
    assert response.status_code == 200, response.text
    body: list[dict[str, Any]] = response.json()
    return body


async def test_a_run_its_owner_cancels_is_billed_for_the_seconds_it_ran(
    api: Api, worker: tuple[Service, JobRunner], workload: Gpu
) -> None:
    task_id = await submit(api)
    run = await start(worker, workload, task_id)

    response = await api.client.delete(f"/tasks/{task_id}", headers=KEY)
    assert response.status_code == 202, response.text
    assert await asyncio.wait_for(run, 10) == "cancelled"

    assert (await status(api, task_id))["status"] == "REVOKED"
    [bill] = await bills(api)
    assert bill["task_id"] == task_id
    assert_billed_for_what_it_ran(bill)
    assert "cancelled after" in bill["description"]


async def test_a_running_job_whose_queue_is_dropped_ends_revoked_unbilled_and_is_counted(
    api: Api, worker: tuple[Service, JobRunner], workload: Gpu
) -> None:
    task_id = await submit(api)
    run = await start(worker, workload, task_id)
    waiting = await submit(api)

    response = await api.client.post(
        "/admin/queues/short/drop", json={"confirm": "short"}, headers=ADMIN
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"queue": "short", "dropped": 1, "stopped": 1}
    # REVOKED at once, whether or not its worker is still alive to stop it
    assert (await status(api, task_id))["status"] == "REVOKED"
    assert (await status(api, waiting))["status"] == "REVOKED"

    assert await asyncio.wait_for(run, 10) == "stopped by an operator"
    assert (await status(api, task_id))["status"] == "REVOKED"
    assert await bills(api) == []
    metrics = (await api.client.get("/metrics")).text
    assert 'fairgpu_jobs_finished_total{queue="short",status="REVOKED"} 2.0' in metrics


async def test_a_released_run_is_unbilled_and_its_rerun_is_billed_once(
    api: Api, worker: tuple[Service, JobRunner], workload: Gpu
) -> None:
    task_id = await submit(api, duration_s=4)
    first = await start(worker, workload, task_id)

    response = await api.client.post(f"/admin/tasks/{task_id}/release", headers=ADMIN)
    assert response.status_code == 200, response.text
    assert await asyncio.wait_for(first, 10) == "lease lost"
    assert await bills(api) == []

    workload.finish.set()
    second = await start(worker, workload, task_id)
    assert await asyncio.wait_for(second, 10) == "done"
    assert workload.runs == 2
    done = await status(api, task_id)
    assert (done["status"], done["attempts"]) == ("SUCCESS", 2)
    [bill] = await bills(api)
    assert bill["task_id"] == task_id
    assert_billed_for_what_it_ran(bill)  # what it ran, not the 4 s it asked for
