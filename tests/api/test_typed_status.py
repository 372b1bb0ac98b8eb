"""A typed job through its life, as GET /task-status shows it: its type, how it ended (error_kind)
and on SUCCESS its output; the stops channel that tells workers a running job was cancelled; and
fairgpu_jobs_ended_total, by type and end. The worker's side is the real store, driven directly
(JobRecorder), so every end is reached without a worker process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, get_args

import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from app import pricing
from app.models import ErrorKind, Status
from app.settings import Settings
from app.store.keys import STOPS
from app.store.submit import NewJob
from tests.api.conftest import Api
from tests.api.helpers import KEY, OWNER, WAIT_S, Worker
from tests.api.typed_jobs import ECHO, with_these_types
from tests.store.support import write_job

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def module_settings(module_settings: Settings) -> Settings:
    return with_these_types(module_settings)


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py), with typed_jobs's job types: a
    job's status and every metric are read from Redis, emptied for each test."""
    return shared_api


async def submit(api: Api, body: dict[str, Any] | None = None) -> str:
    body = body or {"type": ECHO, "input": {"text": "hi"}, "kind": "short"}
    response = await api.client.post("/enqueue-task", json=body, headers=KEY)
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


async def status(api: Api, task_id: str) -> dict[str, Any]:
    response = await api.client.get(f"/task-status/{task_id}", headers=KEY)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def started(worker: Worker, task_id: str) -> str:
    """Lease and start the fairest short job, which must be task_id; the lease's token."""
    token = worker.lease("short")
    run = worker.recorder.start(task_id, token, worker.name, 0)
    assert run.run, run.reason
    return token


# -- what a run is handed, and how it ends --------------------------------------------------------
async def test_a_run_is_handed_its_type_and_input(api: Api, worker: Worker) -> None:
    task_id = await submit(api, {"type": ECHO, "input": {"text": "hi"}, "kind": "short"})
    token = worker.lease("short")

    run = worker.recorder.start(task_id, token, worker.name, None)

    assert (run.run, run.attempt, run.owner, run.duration_s) == (True, 1, OWNER, 10.0)
    assert (run.type, json.loads(run.input)) == (ECHO, {"text": "hi"})


async def test_a_queued_job_shows_its_type_and_no_error_kind(api: Api) -> None:
    body = await status(api, await submit(api))

    assert (body["status"], body["type"], body["error_kind"]) == ("PENDING", ECHO, None)


async def test_a_success_shows_its_output_and_peak_memory(api: Api, worker: Worker) -> None:
    task_id = await submit(api)
    token = started(worker, task_id)
    output = {"text": "hi", "nested": [1, 2.5, None]}

    assert worker.recorder.finish(
        task_id,
        token,
        Status.SUCCESS,
        charge=worker.charge("short", 1.0),
        owner=OWNER,
        output=json.dumps(output),
        peak_gpu_memory_bytes=3 * 2**30,
        peak_rss_bytes=512 * 2**20,
    )

    body = await status(api, task_id)
    assert (body["status"], body["type"], body["error_kind"], body["error"]) == (
        "SUCCESS",
        ECHO,
        None,
        None,
    )
    assert body["result"]["output"] == output
    assert body["result"]["peak_gpu_memory_bytes"] == 3 * 2**30
    assert body["result"]["peak_rss_bytes"] == 512 * 2**20
    # Only the last event carries the output: the one that a stream ends with.
    events = await api.runtime.store.events_after(task_id, "0")
    assert [e.output is not None for _, e in events] == [False, False, True]


@pytest.mark.parametrize("kind", ["exception", "timeout", "crashed"])
async def test_a_failure_shows_how_it_ended_and_no_output(
    api: Api, worker: Worker, kind: Any
) -> None:
    task_id = await submit(api)
    token = started(worker, task_id)

    assert worker.recorder.finish(
        task_id,
        token,
        Status.FAILURE,
        charge=None,
        owner=OWNER,
        error="it went wrong",
        error_kind=kind,
        output='{"partial": true}',
        peak_rss_bytes=1024,
    )

    body = await status(api, task_id)
    assert (body["status"], body["error_kind"], body["error"]) == ("FAILURE", kind, "it went wrong")
    assert body["result"]["output"] is None  # an output is a success's
    assert body["result"]["peak_rss_bytes"] == 1024


async def test_a_failure_without_an_error_kind_is_an_exception(api: Api, worker: Worker) -> None:
    task_id = await submit(api)
    token = started(worker, task_id)
    assert worker.recorder.finish(task_id, token, Status.FAILURE, charge=None, owner=OWNER)

    assert (await status(api, task_id))["error_kind"] == "exception"


async def test_a_job_cancelled_queued_or_running_is_cancelled(api: Api, worker: Worker) -> None:
    running = await submit(api)
    queued = await submit(api)
    token = started(worker, running)

    assert (await api.client.delete(f"/tasks/{queued}", headers=KEY)).status_code == 200
    assert (await api.client.delete(f"/tasks/{running}", headers=KEY)).status_code == 202
    assert (await status(api, running))["error_kind"] is None  # still running, asked to stop
    charge = pricing.price(api.runtime.settings, "short", 0.5, end="cancelled")
    assert worker.recorder.finish(running, token, Status.REVOKED, charge=charge, owner=OWNER)

    for task_id in (queued, running):
        body = await status(api, task_id)
        assert (body["status"], body["error_kind"]) == ("REVOKED", "cancelled")


async def test_a_job_whose_runs_were_all_lost_is_lost(api: Api, worker: Worker) -> None:
    task_id = await submit(api)
    attempts = api.runtime.settings.max_attempts
    for run in range(attempts):
        assert worker.recorder.start(task_id, f"lost-run-{run}", worker.name, None).run

    again = worker.recorder.start(task_id, "one-too-many", worker.name, None)

    assert (again.run, again.reason) == (False, "exhausted")
    body = await status(api, task_id)
    assert (body["status"], body["error_kind"]) == ("FAILURE", "lost")
    assert body["error"] == f"the worker running it was lost {attempts} times"


# -- the stops channel ----------------------------------------------------------------------------
@pytest.fixture
async def stops(redis_url: str) -> AsyncIterator[aioredis.client.PubSub]:
    """A subscription to the channel that workers listen on for cancels."""
    client = aioredis.Redis.from_url(redis_url)
    pubsub = client.pubsub()
    await pubsub.subscribe(STOPS)
    confirmed = await pubsub.get_message(timeout=WAIT_S)  # subscribed before the test acts
    assert confirmed is not None and confirmed["type"] == "subscribe"
    yield pubsub
    await pubsub.aclose()
    await client.aclose()


async def next_stop(stops: aioredis.client.PubSub) -> str:
    message = await stops.get_message(timeout=WAIT_S)
    assert message is not None, f"nothing published on {STOPS} within {WAIT_S} s"
    assert (message["type"], message["channel"]) == ("message", STOPS.encode())
    return str(message["data"].decode())


async def test_a_running_jobs_cancel_is_published_on_stops(
    api: Api, worker: Worker, stops: aioredis.client.PubSub
) -> None:
    running = await submit(api)
    queued = await submit(api)
    started(worker, running)

    # A queued job has no worker to tell: the first id published is the running one's.
    assert (await api.client.delete(f"/tasks/{queued}", headers=KEY)).status_code == 200
    assert (await api.client.delete(f"/tasks/{running}", headers=KEY)).status_code == 202

    assert await next_stop(stops) == running


async def test_an_operators_stop_of_a_running_job_is_published_on_stops(
    api: Api, worker: Worker, stops: aioredis.client.PubSub
) -> None:
    running = await submit(api)
    started(worker, running)

    drop = await api.client.post("/admin/queues/short/drop", json={"confirm": "short"}, headers=KEY)

    assert drop.json()["stopped"] == 1
    assert await next_stop(stops) == running
    body = await status(api, running)
    assert (body["status"], body["error_kind"]) == ("REVOKED", "cancelled")


# -- fairgpu_jobs_ended_total ---------------------------------------------------------------------
async def ended(api: Api) -> dict[tuple[str, str], float]:
    """The counter's samples by (type, end)."""
    text = (await api.client.get("/metrics")).text
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "fairgpu_jobs_ended"]
    return {(s.labels["type"], s.labels["end"]): s.value for s in family.samples}


async def test_ends_are_counted_by_type_and_how(api: Api, worker: Worker) -> None:
    succeeded, revoked, lost = await submit(api), await submit(api), await submit(api)
    token = started(worker, succeeded)
    assert worker.recorder.finish(
        succeeded, token, Status.SUCCESS, charge=None, owner=OWNER, output='{"text": "hi"}'
    )
    assert (await api.client.delete(f"/tasks/{revoked}", headers=KEY)).status_code == 200
    for run in range(api.runtime.settings.max_attempts + 1):
        worker.recorder.start(lost, f"run-{run}", worker.name, None)
    # A type that is not registered (any more) is counted, as "other".
    old = NewJob("retired-1", "short", 1.0, job_type="old")
    retired, _ = await write_job(api.runtime.redis, api.runtime.settings, OWNER, old)
    await api.runtime.store.revoke(retired)

    counts = await ended(api)

    assert {k: v for k, v in counts.items() if v} == {
        (ECHO, "success"): 1,
        (ECHO, "cancelled"): 1,
        (ECHO, "lost"): 1,
        ("other", "cancelled"): 1,
    }
    # every registered type, and "other", with each end: a fixed set of series
    names = {t.name for t in api.runtime.job_types.types()} | {"other"}
    ends = {"success", *get_args(ErrorKind)}
    assert {"oom", "setup", "internal"} <= ends
    assert set(counts) == {(name, end) for name in names for end in ends}
