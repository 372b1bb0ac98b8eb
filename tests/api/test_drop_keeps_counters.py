"""An admin's drop empties a queue, and the queue's counters in GET /admin/queues go on from
where they were (issue 12, item 14)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Api
from tests.api.helpers import KEY, SECOND_KEY, Worker

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): a drop and the counters live in
    Redis, emptied for each test."""
    return shared_api


async def stats(api: Api) -> dict[str, Any]:
    response = await api.client.get("/admin/queues", headers=KEY)
    assert response.status_code == 200, response.text
    [short] = [q for q in response.json()["queues"] if q["name"] == "short"]
    return dict(short["stats"])


async def submit(api: Api) -> str:
    body = {"kind": "short", "duration_s": 5}
    response = await api.client.post("/enqueue-task", json=body, headers=SECOND_KEY)
    assert response.status_code == 200, response.text
    return str(response.json()["task_id"])


async def test_dropping_a_queue_keeps_its_counters(api: Api, worker: Worker) -> None:
    done = await submit(api)
    worker.run(done)
    running = await submit(api)
    worker.start(running, worker.lease())
    await submit(api)
    before = await stats(api)
    assert (before["enqueued"], before["dequeued"]) == (3, 2)

    response = await api.client.post(
        "/admin/queues/short/drop", json={"confirm": "short"}, headers=KEY
    )
    assert response.json() == {"queue": "short", "dropped": 1, "stopped": 1}
    assert await stats(api) == before

    worker.run(await submit(api))
    after = await stats(api)
    assert (after["enqueued"], after["dequeued"]) == (4, 3)
