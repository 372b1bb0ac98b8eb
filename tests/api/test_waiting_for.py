"""Why a queued job waits (`waiting_for`), and the accounts' limits put on the fair queues."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from app.api.routes.jobs import within_held_limit
from app.auth import Account
from app.settings import Settings
from app.wiring.limits import limits_for
from app.wiring.service import job_weight
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, SECOND, SECOND_KEY, Worker

pytestmark = pytest.mark.anyio


async def submit(api: Api, key: dict[str, str], duration_s: float = 5) -> str:
    response = await api.client.post(
        "/enqueue-task", json={"kind": "short", "duration_s": duration_s}, headers=key
    )
    assert response.status_code == 200, response.text
    return str(response.json()["task_id"])


async def state(api: Api, key: dict[str, str], task_id: str) -> dict[str, object]:
    response = await api.client.get(f"/task-status/{task_id}", headers=key)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_a_job_says_whether_it_waits_for_a_gpu_its_turn_or_its_accounts_limit(
    api: Api, worker: Worker
) -> None:
    patched = await api.client.patch(
        f"/admin/accounts/{SECOND}", json={"max_running": 1}, headers=KEY
    )
    assert patched.status_code == 200, patched.text
    theirs = [await submit(api, SECOND_KEY) for _ in range(3)]
    first = await state(api, SECOND_KEY, theirs[0])
    assert (first["position"], first["waiting_for"]) == (0, "gpu")
    worker.start(theirs[0], worker.lease())  # its account now runs one: at its max_running
    ours = await submit(api, KEY)
    held = await state(api, SECOND_KEY, theirs[1])
    assert held["status"] == "PENDING" and held["waiting_for"] == "account_limit"
    mine = await state(api, KEY, ours)
    assert mine["waiting_for"] == "gpu"  # the next one a free worker would take
    assert (await state(api, KEY, await submit(api, KEY)))["waiting_for"] == "turn"
    running = await state(api, SECOND_KEY, theirs[0])
    assert running["status"] == "STARTED" and running["waiting_for"] is None
    assert api.runtime.service.queues["short"].held_back() == 2


async def test_limits_go_to_both_queues_and_clear_when_the_account_has_none(api: Api) -> None:
    limited = Account(user_id=SECOND, max_running=2, max_held_gpu_seconds=30)
    await api.runtime.apply_limits(limited)
    for queue in api.runtime.service.queues.values():
        assert queue.limits(SECOND) == limits_for(limited)
    assert limits_for(limited).most_held == 30_000  # GPU-milliseconds, as the weights are
    await api.runtime.apply_limits(Account(user_id=SECOND))
    for queue in api.runtime.service.queues.values():
        assert queue.limits(SECOND).none


async def test_every_accounts_limits_are_put_on_the_queues_and_stale_ones_cleared(
    api: Api,
) -> None:
    """What an API process does at its start and every LIMITS_EVERY_S: the queues end up with
    exactly the limits the accounts have (the demo accounts have none)."""
    await api.runtime.apply_limits(Account(user_id="gone", max_running=1))
    await api.runtime.apply_limits()
    for queue in api.runtime.queues.values():
        assert await queue.limited() == set()


def test_the_submit_and_the_queue_weigh_a_limit_alike_to_the_millisecond() -> None:
    """A 1.001 s limit holds a 1.001 s job (1.001 x 1000 is 1000.999... as a float), at submit
    and in the queue alike; a job a millisecond longer is refused."""
    account = Account(user_id=SECOND, max_held_gpu_seconds=1.001)
    assert limits_for(account).most_held == job_weight(1.001) == 1001
    within_held_limit(account, 1.001)
    with pytest.raises(HTTPException) as refused:
        within_held_limit(account, 1.002)
    assert refused.value.status_code == 422 and "max_held_gpu_seconds (1.001)" in str(
        refused.value.detail
    )


async def test_with_memory_an_account_that_used_more_comes_back_behind(settings: Settings) -> None:
    """FAIR_SHARE_HALF_LIFE_S reaches both queues, in the API and the workers alike: the second
    account used 3 GPU-seconds a moment ago (its usage, over both queues), so its job queued
    now waits behind the first account's first three seconds of jobs."""
    remembered = settings.model_copy(update={"fair_share_half_life_s": 3600.0})
    async with open_api(remembered) as api:
        for queue in api.runtime.service.queues.values():
            assert queue.usage_half_life_s == 3600.0
        short = api.runtime.service.queues["short"]
        seconds, micros = short.redis.time()
        short.redis.hset(short.keys.usage, SECOND, f"3000 {seconds}{micros:06d}")  # 3 s, in ms
        theirs = await submit(api, SECOND_KEY, duration_s=1)
        for _ in range(5):
            await submit(api, KEY, duration_s=1)
        assert (await state(api, SECOND_KEY, theirs))["position"] == 3
