"""A job's count of cards at submit (issue 42): the body's `gpus`, within its type's range (GET
/job-types lists it), its type's least by default; refused with a 422 naming `gpus`, nothing
written, when it is outside the range, over the account's max_running, or more than any host of
the live fleet has of a class the job may use (a fleet no worker was heard from yet accepts it).
The count is part of the Idempotency-Key's fingerprint."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from pydantic import BaseModel

from app.jobs import JobContext, job
from app.settings import Settings
from app.store.keys import FLEET
from app.store.workers import Seen
from tests.api.conftest import Api
from tests.api.gpu_need_jobs import CATALOG
from tests.api.helpers import KEY, RATE_COUNTERS, SECOND, SECOND_KEY, Untouched, contents

pytestmark = pytest.mark.anyio
TWO = "test-gpus-two"
UP_TO_8 = "test-gpus-up-to-8"
BIG = "test-gpus-big"


class Nothing(BaseModel):
    pass


@job(name=TWO, gpus=2, description="Takes two cards.")
def two(ctx: JobContext, inp: Nothing) -> Nothing:
    return inp


@job(name=UP_TO_8, gpus=(2, 8), description="Takes two to eight cards.")
def up_to_8(ctx: JobContext, inp: Nothing) -> Nothing:
    return inp


@job(name=BIG, gpu=["big"], gpus=(1, 4), description="Takes big cards alone.")
def big(ctx: JobContext, inp: Nothing) -> Nothing:
    return inp


@pytest.fixture(scope="module")
def module_settings(module_settings: Settings) -> Settings:
    """These types, and the GPU-need tests' catalog (big, small)."""
    return module_settings.model_copy(
        update={"job_modules": [__name__], "gpu_classes": json.dumps(CATALOG)}
    )


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py)."""
    return shared_api


def heard(
    r: redis.Redis,
    name: str,
    host: str,
    gpu_class: str,
    *,
    queues: tuple[str, ...] = ("short", "long"),
    ago_s: float = 0.0,
) -> None:
    """A heartbeat of a worker of gpu_class on host, ago_s before Redis's now."""
    seconds, micros = r.time()
    worker = Seen(name, queues, seconds + micros / 1e6 - ago_s, host=host, gpu_class=gpu_class)
    r.hset(FLEET, name, worker.encode())


def fleet(r: redis.Redis, hosts: dict[str, tuple[str, int]]) -> None:
    """Workers heard just now: host -> (class, how many cards)."""
    for host, (gpu_class, cards) in hosts.items():
        for card in range(cards):
            heard(r, f"{host}-{card}", host, gpu_class)


async def post(
    api: Api, body: dict[str, Any], key: dict[str, str] = KEY, once: str | None = None
) -> Any:
    headers = key if once is None else {**key, "Idempotency-Key": once}
    return await api.client.post("/enqueue-task", json=body, headers=headers)


def stored(r: redis.Redis) -> dict[bytes, bytes | None]:
    """What Redis holds, but the requests' rate counters (a refused request is counted too)."""
    return {k: v for k, v in contents(r).items() if not k.startswith(RATE_COUNTERS)}


async def refused(
    api: Api, r: redis.Redis, body: dict[str, Any], key: dict[str, str] = KEY
) -> dict[str, Any]:
    """The one error of a refused submit, which wrote nothing (the fleet's check reads it)."""
    before = stored(r)
    response = await post(api, body, key)
    assert response.status_code == 422, response.text
    assert stored(r) == before, "the refused submit changed Redis"
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "gpus"], error
    return dict(error)


async def cards_of(api: Api, response: Any, key: dict[str, str] = KEY) -> int:
    assert response.status_code == 200, response.text
    state = await api.client.get(f"/task-status/{response.json()['task_id']}", headers=key)
    assert state.status_code == 200, state.text
    gpus: int = state.json()["gpus"]
    return gpus


async def test_job_types_list_each_types_range_of_cards(api: Api) -> None:
    response = await api.client.get("/job-types", headers=KEY)
    assert response.status_code == 200, response.text
    ranges = {t["name"]: (t["min_gpus"], t["max_gpus"]) for t in response.json()}
    assert {name: ranges[name] for name in (TWO, UP_TO_8, BIG, "burn", "script")} == {
        TWO: (2, 2),
        UP_TO_8: (2, 8),
        BIG: (1, 4),
        "burn": (1, 1),
        "script": (1, 64),
    }


async def test_a_job_takes_its_types_least_unless_its_body_says(api: Api) -> None:
    assert await cards_of(api, await post(api, {"type": UP_TO_8})) == 2
    assert await cards_of(api, await post(api, {"type": UP_TO_8, "gpus": 5})) == 5
    assert await cards_of(api, await post(api, {"type": TWO})) == 2
    assert await cards_of(api, await post(api, {"kind": "short", "duration_s": 1})) == 1
    assert await cards_of(api, await post(api, {"type": "burn", "gpus": 1})) == 1


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"type": TWO, "gpus": 1}, f"a job of type {TWO} takes 2 cards, not 1"),
        ({"type": UP_TO_8, "gpus": 9}, f"a job of type {UP_TO_8} takes 2 to 8 cards, not 9"),
        ({"type": "burn", "gpus": 2}, "a job of type burn takes 1 card, not 2"),
    ],
    ids=["under", "over", "burn"],
)
async def test_a_count_outside_its_types_range_is_refused(
    api: Api, r: redis.Redis, body: dict[str, Any], said: str
) -> None:
    with Untouched(r):  # the type's range is known without Redis
        response = await post(api, body)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert (error["loc"], error["type"], error["msg"]) == (
        ["body", "gpus"],
        "gpus_out_of_range",
        said,
    )


@pytest.mark.parametrize("gpus", [0, 65, 65.0, 2.5, "2", True, [2]], ids=repr)
async def test_a_count_that_is_not_a_whole_number_from_1_to_64_is_refused(
    api: Api, r: redis.Redis, gpus: object
) -> None:
    with Untouched(r):
        response = await post(api, {"type": UP_TO_8, "gpus": gpus})
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "gpus"], error


async def test_a_whole_number_written_as_a_float_is_that_number(api: Api) -> None:
    """JSON Schema's integer: 3.0 is 3, as the schema lets any client write it."""
    assert await cards_of(api, await post(api, {"type": UP_TO_8, "gpus": 3.0})) == 3


async def test_the_short_body_has_no_gpus_field(api: Api, r: redis.Redis) -> None:
    """A burn job takes one card: the original body {"kind", "duration_s"} is not given a count
    (a typed burn body may say 1)."""
    with Untouched(r):
        response = await post(api, {"kind": "short", "duration_s": 2, "gpus": 1})
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert (error["loc"], error["type"]) == (["body", "gpus"], "extra_forbidden")


async def test_no_host_with_that_many_cards_of_a_class_it_may_use_is_refused(
    api: Api, r: redis.Redis
) -> None:
    fleet(r, {"h1": ("big", 2), "h2": ("big", 1), "h3": ("small", 3)})
    heard(r, "h2-long", "h2", "big", queues=("long",))  # another queue's: not the short one's
    heard(r, "h2-old", "h2", "big", ago_s=api.runtime.settings.fleet_ttl_s + 60)  # not in it
    assert await cards_of(api, await post(api, {"type": BIG, "gpus": 2})) == 2
    error = await refused(api, r, {"type": BIG, "gpus": 3})
    assert error["type"] == "gpus_no_host"
    assert error["msg"].startswith("no host of the fleet has 3 cards of class big serving the ")
    assert "(the most on one host is 2)" in error["msg"]
    assert await cards_of(api, await post(api, {"type": UP_TO_8, "gpus": 3})) == 3  # h3's small
    error = await refused(api, r, {"type": UP_TO_8, "gpus": 4})
    assert "has 4 cards of class small or big serving the short queue" in error["msg"]
    heard(r, "h1-2", "h1", "big")  # a card more on h1, a restarted host coming back, say
    assert await cards_of(api, await post(api, {"type": BIG, "gpus": 3})) == 3


async def test_a_fleet_no_worker_was_heard_from_yet_accepts_any_count(
    api: Api, r: redis.Redis
) -> None:
    """A deployment whose workers have not started yet: the job waits for them."""
    assert not r.exists(FLEET)
    assert await cards_of(api, await post(api, {"type": UP_TO_8, "gpus": 8})) == 8


async def test_a_count_over_the_accounts_max_running_is_refused(api: Api, r: redis.Redis) -> None:
    """max_running counts the cards an account's running jobs hold: a job of more could never
    start. The fleet has room: the account is what refuses it."""
    fleet(r, {"h1": ("small", 4)})
    patched = await api.client.patch(
        f"/admin/accounts/{SECOND}", json={"max_running": 2}, headers=KEY
    )
    assert patched.status_code == 200, patched.text
    error = await refused(api, r, {"type": UP_TO_8, "gpus": 3}, SECOND_KEY)
    assert error["type"] == "gpus_over_max_running"
    assert "more than the account's max_running (2)" in error["msg"]
    assert await cards_of(api, await post(api, {"type": UP_TO_8}, SECOND_KEY), SECOND_KEY) == 2
    assert await cards_of(api, await post(api, {"type": UP_TO_8, "gpus": 3})) == 3  # no limit


async def test_max_held_gpu_seconds_counts_every_card(api: Api) -> None:
    """A job of 2 cards for 6 s holds 12 GPU-seconds: over a limit of 10, where one card is
    not."""
    patched = await api.client.patch(
        f"/admin/accounts/{SECOND}", json={"max_held_gpu_seconds": 10}, headers=KEY
    )
    assert patched.status_code == 200, patched.text
    body = {"type": UP_TO_8, "duration_s": 6}
    response = await post(api, body, SECOND_KEY)
    assert response.status_code == 422, response.text
    assert "this job's 12 GPU-seconds pass" in response.json()["detail"]
    alone = await post(api, {"type": "burn", "duration_s": 6}, SECOND_KEY)
    assert alone.status_code == 200, alone.text


async def test_the_count_is_part_of_the_idempotency_fingerprint(api: Api) -> None:
    first = await post(api, {"type": UP_TO_8, "gpus": 4}, once="cards-1")
    again = await post(api, {"type": UP_TO_8, "gpus": 4}, once="cards-1")
    assert first.status_code == again.status_code == 200, first.text
    assert first.json()["task_id"] == again.json()["task_id"]
    other = await post(api, {"type": UP_TO_8, "gpus": 3}, once="cards-1")
    assert other.status_code == 422, other.text
    assert "Idempotency-Key" in other.json()["detail"]
    # The type's least, said or not, is the same job.
    least = await post(api, {"type": UP_TO_8}, once="cards-2")
    said = await post(api, {"type": UP_TO_8, "gpus": 2}, once="cards-2")
    assert least.status_code == said.status_code == 200, least.text
    assert least.json()["task_id"] == said.json()["task_id"]
