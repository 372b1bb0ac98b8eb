"""A lean submit: the answer to POST /enqueue-task waits for one round trip to Redis, a single
scripting call, the fair queue's enqueue, in which the job store's hooks count the key's rate
and write the job's record; nothing is left to write after the answer. A request over its rate
is refused by that call and changes nothing but its counter."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

from app.api.routes import jobs
from app.api.routing import Caller
from app.api.submissions import submission
from app.auth import digest
from app.ledger.live import CHANGED
from app.models import EnqueueRequest, EnqueueResponse
from app.settings import Settings
from app.store.keys import job_key, rate_key
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, RoundTrips, contents
from tests.worker.test_calls_per_job import SCRIPTING

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


def scripting(trips: RoundTrips) -> int:
    """The scripting calls the server has run (scripts on 6.2, functions on 7), read through the
    observer (its round trip is not counted)."""
    stats: dict[str, Any] = trips.ask("INFO", "commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in SCRIPTING)


async def warmed_up(api: Api) -> None:
    """One submit first, so that the pool's connection is open, every script or function is
    loaded and Celery's trigger message is stored (the scripts push the triggers from then on);
    then the process's own start-up round trips done (its clock's first TIME, the event hub's
    and the accounts' subscriptions), which a busy machine may delay into the counted submit."""
    response = await api.client.post("/enqueue-task", json=BODY, headers=KEY)
    assert response.status_code == 200, response.text
    runtime = api.runtime
    await asyncio.wait_for(runtime.hub.connected.wait(), timeout=30)
    deadline = time.monotonic() + 30
    while runtime.clock.syncs == 0 or not await listened(api, CHANGED):
        assert time.monotonic() < deadline, "the API's start-up round trips did not end"
        await asyncio.sleep(0.01)  # a poll of the conditions above


async def listened(api: Api, channel: str) -> bool:
    """Whether a client listens on channel (asked before the count starts)."""
    [(_, subscribers)] = await api.runtime.redis.pubsub_numsub(channel)
    return int(subscribers) > 0


@pytest.mark.parametrize("budgeted", [False, True], ids=["no budget", "a monthly budget"])
async def test_the_answer_waits_for_one_round_trip_a_single_scripting_call(
    api: Api, r: redis.Redis, budgeted: bool
) -> None:
    """A budget is checked and held in that same call (app/store/lua/submit.lua)."""
    await warmed_up(api)
    runtime = api.runtime
    account = runtime.accounts.authenticate(KEY["X-API-Key"])
    assert account is not None
    if budgeted:
        account = account.model_copy(update={"budget_gpu_seconds": 100.0})
    caller = Caller(account, digest(KEY["X-API-Key"]))
    body = EnqueueRequest(kind="short", duration_s=1.0)
    job = submission(body, runtime.job_types, runtime.settings)

    trips = RoundTrips(r)
    before = scripting(trips)
    task_id = await jobs.submit(runtime, caller, job, None)  # what the answer waits for
    assert trips.count() == 1
    assert scripting(trips) - before == 1  # the one round trip is the scripting call
    assert trips.ask("HGET", job_key(task_id), "status") == b"PENDING"
    assert trips.ask("HGET", job_key(task_id), "held_ms") == (b"1000" if budgeted else None)
    assert await runtime.queues["short"].position(task_id) is not None


async def test_a_served_submit_makes_one_round_trip_in_all(api: Api, r: redis.Redis) -> None:
    await warmed_up(api)
    trips = RoundTrips(r)
    before, syncs = scripting(trips), api.runtime.clock.syncs
    response = await api.client.post("/enqueue-task", json=BODY, headers=KEY)
    assert response.status_code == 200, response.text
    clock = api.runtime.clock.syncs - syncs  # its TIME every SYNC_S, not the submit's
    assert trips.count() - clock == 1  # no separate rate count, nothing written after the answer
    assert scripting(trips) - before == 1


async def test_every_job_of_concurrent_submits_is_written_and_queued(
    api: Api, r: redis.Redis
) -> None:
    replies = await asyncio.gather(
        *(api.client.post("/enqueue-task", json=BODY, headers=KEY) for _ in range(8))
    )
    assert {reply.status_code for reply in replies} == {200}
    ids = [reply.json()["task_id"] for reply in replies]
    assert all(r.hget(job_key(task_id), "status") == b"PENDING" for task_id in ids)
    assert None not in await api.runtime.queues["short"].positions(ids)


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
    await warmed_up(strict_api)  # its own second's count is overwritten below
    counters = spent(r, KEY["X-API-Key"])
    before = contents(r)
    trips = RoundTrips(r)
    refused = await strict_api.client.post("/enqueue-task", json=BODY, headers=KEY)
    assert trips.count() == 1  # the one call, whose hook refused it
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


async def test_a_submit_that_no_replica_acknowledges_is_a_503_that_says_to_send_it_again(
    settings: Settings, r: redis.Redis
) -> None:
    """REDIS_MIN_REPLICAS=1 on a Redis without a replica: the submit's write reaches none, so it
    is not answered 200 (a failover could lose it), and says to resend it with the same
    Idempotency-Key (tests/api/test_idempotency.py: a resend gets the job written)."""
    async with open_api(settings.model_copy(update={"redis_min_replicas": 1})) as api:
        headers = {**KEY, "Idempotency-Key": "safe"}
        first = await api.client.post("/enqueue-task", json=BODY, headers=headers)
        assert first.status_code == 503
        assert first.headers["retry-after"] == "1"
        assert "send the request again with the same Idempotency-Key" in first.json()["detail"]
        assert len(r.keys(job_key("*"))) == 1  # written on the primary: a retry replays it
