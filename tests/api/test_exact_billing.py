"""Sub-cent jobs are not free: every bill is exact to the micro-unit, at least MIN_BILLED_S, and
the bills of many tiny jobs add up to the price times their billable seconds (issue 12, item 1)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from app.settings import Settings
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, USERS_FILE, Worker

pytestmark = pytest.mark.anyio

#: Tiny durations: the issue's twenty 0.0199 s jobs, and others down to the least float.
TINY = [0.0199] * 20 + [0.001, 0.0004, 1e-9, 5e-324, 0.07, 0.333, 0.5, 0.9999]
#: A few above the floor, where a bill is for exactly the seconds asked.
ABOVE = [1.0, 1.001, 1.2345, 2.0001, 59.999]


@pytest.fixture(params=[1.0, 0.0], ids=["floor 1 s", "no floor"])
async def api(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[Api]:
    settings = Settings(redis_url=redis_url, users_file=USERS_FILE, min_billed_s=request.param)
    async with open_api(settings) as opened:
        yield opened


@pytest.fixture
def worker(api: Api) -> Any:
    opened = Worker.open(api.runtime.settings)
    yield opened
    opened.close()


async def run_all(api: Api, worker: Worker, kind: str, durations: list[float]) -> None:
    for duration in durations:
        body = {"kind": kind, "duration_s": duration}
        response = await api.client.post("/enqueue-task", json=body, headers=KEY)
        assert response.status_code == 200, response.text
        await asyncio.to_thread(worker.run, response.json()["task_id"], kind)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["short", "long"])
async def test_the_bills_of_many_tiny_jobs_add_up_exactly_and_none_is_free(
    api: Api, worker: Worker, kind: str
) -> None:
    await run_all(api, worker, kind, TINY + ABOVE)

    response = await api.client.get("/billing-records?limit=1000", headers=KEY)
    bills: list[dict[str, Any]] = response.json()
    assert len(bills) == len(TINY + ABOVE)
    settings = api.runtime.settings
    price = Decimal(repr(settings.price_per_s(kind)))  # type: ignore[arg-type]
    floor = Decimal(repr(settings.min_billed_s))
    for bill in bills:
        assert bill["cost"] > 0, bill
        billed = Decimal(repr(bill["billed_seconds"]))
        assert billed == max(floor, Decimal(repr(bill["gpu_seconds"]))), bill
        # the JSON number is the exact cost, digit for digit, and so is the integer
        assert Decimal(repr(bill["cost"])) == price * billed == Decimal(bill["cost_micros"]) / 10**6
    total = sum(Decimal(repr(bill["cost"])) for bill in bills)
    assert total == price * sum(Decimal(repr(bill["billed_seconds"])) for bill in bills)
    # and the figures of the issue: twenty 0.0199 s jobs are never twenty bills of 0.0
    tiny = sorted(Decimal(repr(b["cost"])) for b in bills if b["gpu_seconds"] == 0.02)
    assert len(tiny) == 20 and tiny[0] == price * max(floor, Decimal("0.02"))


async def test_the_billed_totals_in_the_metrics_are_exact(api: Api, worker: Worker) -> None:
    await run_all(api, worker, "long", [0.0199] * 20)

    response = await api.client.get("/metrics")
    lines = dict(
        line.rsplit(" ", 1) for line in response.text.splitlines() if not line.startswith("#")
    )
    floor = max(Decimal(repr(api.runtime.settings.min_billed_s)), Decimal("0.02"))
    cost = lines['fairgpu_billed_cost_total{queue="long"}']
    seconds = lines['fairgpu_billed_gpu_seconds_total{queue="long"}']
    assert Decimal(cost) == Decimal("0.25") * 20 * floor
    assert Decimal(seconds) == 20 * floor
