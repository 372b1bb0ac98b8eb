"""A job's count of cards after its submit (issue 42): kept on its record and in its status, its
fair-queue item sized and weighed by it; a queued job of several cards that holds a reservation
says `waiting_for: "gpu"`, with the reservation's host and expected start."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from app.api.submissions import Submission
from app.settings import Settings
from app.vtrr import FairQueue, Slot
from app.wiring.service import LIMITS_GROUP, job_weight
from tests.api.conftest import Api
from tests.api.helpers import KEY
from tests.api.test_gpus import TWO, UP_TO_8

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def module_settings(module_settings: Settings) -> Settings:
    """The types of tests/api/test_gpus.py, no catalog."""
    return module_settings.model_copy(update={"job_modules": ["tests.api.test_gpus"]})


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py)."""
    return shared_api


async def submitted(api: Api, body: dict[str, Any]) -> str:
    response = await api.client.post("/enqueue-task", json=body, headers=KEY)
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


async def status(api: Api, task_id: str) -> dict[str, Any]:
    response = await api.client.get(f"/task-status/{task_id}", headers=KEY)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def card(r: redis.Redis, number: int) -> FairQueue:
    """A worker's consumer of the short queue, standing for card `number` of host h1, as the
    API's queue names its keys (one limits group)."""
    return FairQueue(
        r, "short", limits_group=LIMITS_GROUP, slot=Slot("h1", str(number), f"w{number}@h1")
    )


async def test_the_record_and_the_status_keep_the_count(api: Api, r: redis.Redis) -> None:
    five = await submitted(api, {"type": UP_TO_8, "gpus": 5})
    one = await submitted(api, {"kind": "short", "duration_s": 1})
    assert (await status(api, five))["gpus"] == 5
    assert (await status(api, one))["gpus"] == 1
    job = await api.runtime.store.get(five)
    assert job is not None and job.gpus == 5
    assert r.hget(f"fairgpu:job:{one}", "gpus") is None  # a record of one card says nothing


async def test_the_item_takes_its_cards_at_once_for_its_limit_and_the_grace(api: Api) -> None:
    service, grace = api.runtime.service, api.runtime.settings.timeout_grace_s
    item = service.job_item("long", "j1", 90.0, gpus=4)
    assert (item.size, item.span, item.weight) == (4, 90.0 + grace, 4 * job_weight(90.0))
    alone = service.job_item("long", "j2", 90.0)
    assert (alone.size, alone.span, alone.weight) == (1, 90.0 + grace, job_weight(90.0))


def test_one_card_keeps_the_fingerprint_it_had_before_counts() -> None:
    burn = Submission("burn", "{}", "short", 5.0)
    assert burn.fingerprint() == "short:5.0"
    assert Submission("burn", "{}", "short", 5.0, gpus=2).fingerprint() == "short:5.0:gpus:2"


async def test_a_job_holding_a_reservation_waits_for_its_cards(api: Api, r: redis.Redis) -> None:
    """Host h1 has two cards; one runs a job of one card: the job of two, whose turn has come,
    is kept the host's cards from when that run's limit (and the grace) is up."""
    first, second = card(r, 0), card(r, 1)
    for consumer in (first, second):
        consumer.tick(60)
    running = await submitted(api, {"kind": "short", "duration_s": 30})
    lease = first.dequeue()
    assert lease is not None and lease.task_id == running
    pair = await submitted(api, {"type": TWO, "duration_s": 5})
    second.tick(60)
    state = await status(api, pair)
    assert (state["gpus"], state["waiting_for"]) == (2, "gpu")
    reserved = state["reservation"]
    assert reserved["host"] == "h1"
    [kept] = api.runtime.service.queues["short"].reservations().values()
    assert reserved["expected_start_at"] == kept.start_at == state["estimated_start_at"]
    unreserved = await status(api, await submitted(api, {"type": TWO}))
    assert unreserved["reservation"] is None and unreserved["waiting_for"] == "turn"
