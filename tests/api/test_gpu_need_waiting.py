"""A job whose need the catalog meets but no live worker does is accepted and waits, saying so
(`waiting_for: "gpu_class"`) until a worker of one of its classes is heard; without a catalog a
job runs on any card, and a need that names classes has none to name."""

from __future__ import annotations

import uuid

import pytest
import redis

from app.settings import Settings
from app.store.keys import FLEET
from app.store.submit import NewJob, hook_args
from app.store.workers import Seen
from tests.api.conftest import Api, open_api
from tests.api.gpu_need_jobs import ANY, BIG_FIRST, MEMORY, with_catalog
from tests.api.helpers import KEY, OWNER

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def module_settings(module_settings: Settings) -> Settings:
    """The catalog's two classes (big, small) and the types of gpu_need_jobs."""
    return with_catalog(module_settings)


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py)."""
    return shared_api


def heard(r: redis.Redis, name: str, gpu_class: str, ago_s: float = 0.0) -> None:
    """A heartbeat of a worker of gpu_class, ago_s before Redis's now."""
    seconds, micros = r.time()
    now = seconds + micros / 1e6
    worker = Seen(name, ("short", "long"), now - ago_s, host="h1", gpu_class=gpu_class)
    r.hset(FLEET, name, worker.encode())


async def queued(api: Api, gpu_classes: tuple[str, ...]) -> str:
    """A job written and queued as the submit does, with these classes on its record."""
    runtime, job_id = api.runtime, str(uuid.uuid4())
    new = NewJob(job_id, "short", 5.0, gpu_classes=gpu_classes)
    item = runtime.service.job_item("short", job_id, 5.0)
    args = hook_args(OWNER, new, runtime.settings)
    admitted = await runtime.queues["short"].admit_and_enqueue(OWNER, [item], args)
    assert admitted.queued
    return job_id


async def waiting_for(api: Api, job_id: str) -> tuple[object, object]:
    response = await api.client.get(f"/task-status/{job_id}", headers=KEY)
    assert response.status_code == 200, response.text
    body = response.json()
    return body["waiting_for"], body["estimated_start_at"]


async def test_the_record_keeps_the_classes_in_order(api: Api) -> None:
    job = await api.runtime.store.get(await queued(api, ("big", "small")))
    assert job is not None and job.gpu_classes == ("big", "small")
    anywhere = await api.runtime.store.get(await queued(api, ()))
    assert anywhere is not None and anywhere.gpu_classes == ()


async def test_a_job_no_live_worker_can_serve_waits_for_its_class(api: Api, r: redis.Redis) -> None:
    job_id = await queued(api, ("big",))
    assert await waiting_for(api, job_id) == ("gpu_class", None)
    heard(r, "small-1", "small")
    assert (await waiting_for(api, job_id))[0] == "gpu_class"
    heard(r, "big-1", "big", ago_s=api.runtime.settings.fleet_ttl_s + 60)  # out of the fleet
    assert (await waiting_for(api, job_id))[0] == "gpu_class"
    heard(r, "big-2", "big", ago_s=60)  # silent for a minute: still in the fleet
    assert (await waiting_for(api, job_id))[0] == "gpu"


async def test_a_job_any_class_serves_waits_as_before(api: Api, r: redis.Redis) -> None:
    heard(r, "small-1", "small")
    assert (await waiting_for(api, await queued(api, ("big", "small"))))[0] == "gpu"
    assert (await waiting_for(api, await queued(api, ())))[0] == "turn"


async def test_a_submit_the_fleet_cannot_serve_yet_is_accepted_and_waits(
    api: Api, r: redis.Redis
) -> None:
    response = await api.client.post("/enqueue-task", json={"type": MEMORY}, headers=KEY)
    assert response.status_code == 200, response.text
    job_id = response.json()["task_id"]
    job = await api.runtime.store.get(job_id)
    assert job is not None and job.gpu_classes == ("big",)
    heard(r, "small-1", "small")
    assert await waiting_for(api, job_id) == ("gpu_class", None)
    heard(r, "big-1", "big")
    assert (await waiting_for(api, job_id))[0] == "gpu"


async def test_without_a_catalog_any_card_serves(settings: Settings) -> None:
    async with open_api(with_catalog(settings, None)) as api:
        listed = await api.client.get("/job-types", headers=KEY)
        types = {t["name"]: t for t in listed.json()}
        assert types[ANY]["gpu_classes"] is None
        assert types[MEMORY]["gpu_classes"] is None  # its memory is taken on trust
        assert types[BIG_FIRST]["gpu_classes"] == []
        for body in ({"type": MEMORY}, {"type": ANY, "gpu": {"min_memory_gb": 500}}):
            response = await api.client.post("/enqueue-task", json=body, headers=KEY)
            assert response.status_code == 200, response.text
        for body, loc in (
            ({"type": BIG_FIRST}, ["body", "gpu"]),
            ({"type": ANY, "gpu": {"classes": ["big"]}}, ["body", "gpu", "classes"]),
        ):
            response = await api.client.post("/enqueue-task", json=body, headers=KEY)
            assert response.status_code == 422, response.text
            [error] = response.json()["detail"]
            assert (error["loc"], error["type"]) == (loc, "gpu_class_unknown")
