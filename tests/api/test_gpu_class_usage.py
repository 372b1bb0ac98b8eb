"""GET /billing-records names each bill's class of card, and GET /usage?group_by=gpu_class sums
the bills per class (issue 41): GPU-seconds plain, cost weighted by each class's price, the
bills without a class (no catalog) in a row keyed null; the ledger and the outbox alike."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from app import pricing
from app.ledger.outbox import LedgerWriter
from app.models import Status
from tests.api.conftest import Api
from tests.api.helpers import KEY, OWNER, SECOND, SECOND_KEY, Worker

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    return shared_api


async def run_on(
    api: Api, worker: Worker, key: dict[str, str], owner: str, place: tuple[str | None, float]
) -> str:
    """A 4 s short job run to its end on a card of this class (name, price), billed as the
    worker's RunEnds bills it."""
    response = await api.client.post(
        "/enqueue-task", json={"kind": "short", "duration_s": 4}, headers=key
    )
    job_id: str = response.json()["task_id"]
    token = worker.lease()
    worker.start(job_id, token)
    gpu_class, price = place
    charge = pricing.price(worker.settings, "short", 4.0, gpu_class=gpu_class, class_price=price)
    end = {"charge": charge, "owner": owner, "host": "node-a", "gpu_class": gpu_class}
    assert worker.recorder.finish(job_id, token, Status.SUCCESS, **end)
    return job_id


async def get(api: Api, path: str, key: dict[str, str] = KEY) -> Any:
    response = await api.client.get(path, headers=key)
    assert response.status_code == 200, response.text
    return response.json()


async def test_usage_by_class_sums_plain_seconds_and_weighted_cost(
    api: Api, worker: Worker, r: redis.Redis
) -> None:
    big = await run_on(api, worker, KEY, OWNER, ("big", 2.0))
    await run_on(api, worker, KEY, OWNER, ("small", 1.0))
    await run_on(api, worker, SECOND_KEY, SECOND, ("big", 2.0))
    await run_on(api, worker, KEY, OWNER, (None, 1.0))  # billed before the catalog
    [record] = [b for b in await get(api, "/billing-records") if b["task_id"] == big]
    assert (record["gpu_class"], record["billed_seconds"], record["cost"]) == ("big", 4.0, 4.0)
    expected = [  # 4 s at 0.5/s, times the class's price
        {"key": "big", "gpu_seconds": 8.0, "jobs": 2, "cost": 8.0, "cost_micros": 8_000_000},
        {"key": "small", "gpu_seconds": 4.0, "jobs": 1, "cost": 2.0, "cost_micros": 2_000_000},
        {"key": None, "gpu_seconds": 4.0, "jobs": 1, "cost": 2.0, "cost_micros": 2_000_000},
    ]
    on_the_way = await get(api, "/usage?group_by=gpu_class")  # an admin: every account
    assert on_the_way["rows"] == expected
    assert (on_the_way["total"]["jobs"], on_the_way["total"]["cost"]) == (4, 12.0)
    assert LedgerWriter(r, api.runtime.ledger.db, "test-writer").write_once() == 4
    assert (await get(api, "/usage?group_by=gpu_class"))["rows"] == expected
    own = await get(api, "/usage?group_by=gpu_class", key=SECOND_KEY)
    assert [(row["key"], row["cost"]) for row in own["rows"]] == [("big", 4.0)]
