"""A lean submit: the answer to POST /enqueue-task waits for two round trips to Redis (create.lua,
which counts the key's rate too, then the fair queue's enqueue); the job leaves the unqueued list
after the answer, in a write shared with other submits; a request over its rate is refused by
create.lua and changes nothing but its counter."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import redis

from app.api.routes import jobs
from app.api.routing import Caller
from app.api.submissions import submission
from app.auth import digest
from app.models import EnqueueRequest, EnqueueResponse
from app.settings import Settings
from app.store.keys import UNQUEUED, rate_key
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, WAIT_S, RoundTrips, contents

pytestmark = pytest.mark.anyio
BODY = {"kind": "short", "duration_s": 1}


@pytest.fixture
async def strict_api(settings: Settings) -> AsyncIterator[Api]:
    """An API that lets a key make one request a second."""
    async with open_api(settings.model_copy(update={"rate_limit_per_s": 1})) as api:
        yield api


@pytest.fixture
async def unlimited_api(settings: Settings) -> AsyncIterator[Api]:
    """An API that counts no rate."""
    async with open_api(settings.model_copy(update={"rate_limit_per_s": 0})) as api:
        yield api


def off_the_list(trips: RoundTrips, task_id: str) -> None:
    """Wait until the job has left the unqueued list (the observer's polls are not counted)."""
    deadline = time.monotonic() + WAIT_S
    while trips.ask("ZSCORE", UNQUEUED, task_id) is not None:
        assert time.monotonic() < deadline, f"{task_id} is still on the unqueued list"


async def warmed_up(api: Api, r: redis.Redis) -> None:
    """One submit first, so that the pool's connection is open and every script is loaded; then
    nothing of it is left to write."""
    response = await api.client.post("/enqueue-task", json=BODY, headers=KEY)
    assert response.status_code == 200, response.text
    off_the_list(RoundTrips(r), response.json()["task_id"])


async def test_the_answer_waits_for_two_round_trips_and_the_list_for_one_more(
    api: Api, r: redis.Redis
) -> None:
    await warmed_up(api, r)
    runtime = api.runtime
    account = runtime.accounts.authenticate(KEY["X-API-Key"])
    assert account is not None
    caller = Caller(account, digest(KEY["X-API-Key"]))
    body = EnqueueRequest(kind="short", duration_s=1.0)
    job = submission(body, runtime.job_types, runtime.settings)

    trips = RoundTrips(r)
    task_id = await jobs.submit(runtime, caller, job, None)  # what the answer waits for
    assert trips.count() == 2  # nothing awaited since: the list's write has not been sent
    assert trips.ask("ZSCORE", UNQUEUED, task_id) is not None
    await runtime.store.marks.flush()  # what the server runs once the answer has gone
    assert trips.count() == 3
    assert trips.ask("ZSCORE", UNQUEUED, task_id) is None


async def test_a_served_submit_makes_three_round_trips_in_all(api: Api, r: redis.Redis) -> None:
    await warmed_up(api, r)
    trips = RoundTrips(r)
    response = await api.client.post("/enqueue-task", json=BODY, headers=KEY)
    assert response.status_code == 200, response.text
    off_the_list(trips, response.json()["task_id"])
    assert trips.count() == 3  # no separate rate count: it is create.lua's


async def test_every_job_of_concurrent_submits_leaves_the_unqueued_list(
    api: Api, r: redis.Redis
) -> None:
    replies = await asyncio.gather(
        *(api.client.post("/enqueue-task", json=BODY, headers=KEY) for _ in range(8))
    )
    assert {reply.status_code for reply in replies} == {200}
    assert r.zcard(UNQUEUED) == 0  # each answer's call ends once its job is off the list


async def test_the_answer_is_the_enqueue_response_model_exactly(api: Api) -> None:
    response = await api.client.post("/enqueue-task", json=BODY, headers=KEY)
    task_id = response.json()["task_id"]
    assert response.content == EnqueueResponse(task_id=task_id).model_dump_json().encode()
    assert response.headers["content-type"] == "application/json"
    assert response.headers["content-length"] == str(len(response.content))


def spent(r: redis.Redis, key: str) -> list[bytes]:
    """Use up the key's one request a second, now and for the next two seconds (long enough for
    what follows); the counters."""
    now = int(time.time())
    counters = [rate_key(digest(key), second).encode() for second in range(now, now + 3)]
    for counter in counters:
        r.set(counter, 1, ex=5)
    return counters


async def test_a_submit_over_the_rate_changes_nothing_but_its_counter(
    strict_api: Api, r: redis.Redis
) -> None:
    await warmed_up(strict_api, r)  # its own second's count is overwritten below
    counters = spent(r, KEY["X-API-Key"])
    before = contents(r)
    trips = RoundTrips(r)
    refused = await strict_api.client.post("/enqueue-task", json=BODY, headers=KEY)
    assert trips.count() == 1  # create.lua alone
    after = contents(r)

    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.json() == {"detail": "more than 1 requests a second with this key"}
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    [counter] = changed
    assert counter in counters
    assert r.get(counter) == b"2"
    assert 0 < r.ttl(counter) <= 2  # the expiry every count gives it


async def test_the_submit_and_the_other_routes_refuse_alike_on_one_count(
    strict_api: Api, r: redis.Redis
) -> None:
    counters = spent(r, KEY["X-API-Key"])
    submitted = await strict_api.client.post("/enqueue-task", json=BODY, headers=KEY)
    listed = await strict_api.client.get("/billing-records", headers=KEY)

    assert submitted.status_code == listed.status_code == 429
    assert submitted.json() == listed.json()
    assert submitted.headers["retry-after"] == listed.headers["retry-after"]
    assert submitted.headers["content-type"] == listed.headers["content-type"]
    assert sum(int(r.get(c) or 0) for c in counters) == 3 + 2  # both counted, on the key's


async def test_without_a_rate_limit_a_submit_writes_no_counter(
    unlimited_api: Api, r: redis.Redis
) -> None:
    response = await unlimited_api.client.post("/enqueue-task", json=BODY, headers=KEY)
    assert response.status_code == 200, response.text
    assert r.keys("fairgpu:rate:*") == []
