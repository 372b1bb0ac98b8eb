"""The store's side of job types, on the suite's Redis: a job's type in its hash and its input
under a key of its own, what start() hands a run (also for a job written before types), and
what finish() keeps and bills."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from app import pricing
from app.models import Status
from app.settings import Settings
from app.store import JobRecorder, JobStore
from app.store.keys import METRICS, events_key, input_key, job_key
from app.store.submit import NewJob
from tests.store.support import write_job
from tests.support import bills_of

pytestmark = pytest.mark.anyio
OWNER = "11111111-1111-1111-1111-111111111111"
JOB = "0b7d2f6e-0000-4000-8000-000000000001"


@pytest.fixture
async def store(settings: Settings) -> AsyncIterator[JobStore]:
    client = aioredis.Redis.from_url(settings.redis_url)
    yield JobStore(client, settings)
    await client.aclose()


@pytest.fixture
def recorder(settings: Settings, r: redis.Redis) -> JobRecorder:
    return JobRecorder(r, settings)


async def created(store: JobStore, settings: Settings) -> str:
    """The job JOB of type vad, written and queued as the API does."""
    job = NewJob(JOB, "short", 30.0, job_type="vad", input_json='{"a":1}')
    await write_job(store.redis, settings, OWNER, job)
    return JOB


async def test_the_type_is_in_the_hash_and_the_input_apart(
    store: JobStore, r: redis.Redis, settings: Settings
) -> None:
    await created(store, settings)

    assert r.hget(job_key(JOB), "type") == b"vad"
    assert not r.hexists(job_key(JOB), "input")
    assert r.get(input_key(JOB)) == b'{"a":1}'
    assert 0 < r.ttl(input_key(JOB)) <= settings.job_ttl_s
    job = await store.get(JOB)
    assert job is not None
    assert (job.type, job.error_kind, job.output) == ("vad", None, None)


async def test_a_run_is_handed_the_type_and_input_and_keeps_the_input(
    store: JobStore, recorder: JobRecorder, r: redis.Redis, settings: Settings
) -> None:
    await created(store, settings)
    r.expire(input_key(JOB), 100)

    run = recorder.start(JOB, "token-1", "cpu@test", None)

    assert (run.run, run.type, run.input, run.owner, run.duration_s) == (
        True,
        "vad",
        '{"a":1}',
        OWNER,
        30.0,
    )
    assert r.ttl(input_key(JOB)) > 100  # renewed with the job when the run started


async def test_a_job_written_before_types_runs_as_burn_with_no_input(
    recorder: JobRecorder, r: redis.Redis
) -> None:
    r.hset(
        job_key(JOB),
        mapping={
            "task_id": JOB,
            "owner": OWNER,
            "kind": "short",
            "duration_s": "5.0",
            "status": "PENDING",
            "attempts": "0",
            "enqueued_at": "1700000000.0",
        },
    )

    run = recorder.start(JOB, "token-1", "cpu@test", 0)

    assert (run.run, run.type, run.input) == (True, "burn", "{}")
    job = recorder.get(JOB)
    assert job is not None
    assert job.status_view().type == "burn"
    assert recorder.finish(JOB, "token-1", Status.SUCCESS, charge=None, owner=OWNER)
    assert r.hget(METRICS, "ended:burn:success") == b"1"


async def test_finish_keeps_the_output_and_peaks_in_the_hash(
    store: JobStore, recorder: JobRecorder, r: redis.Redis, settings: Settings
) -> None:
    await created(store, settings)
    recorder.start(JOB, "token-1", "cpu@test", 0)

    assert recorder.finish(
        JOB,
        "token-1",
        Status.SUCCESS,
        charge=None,
        owner=OWNER,
        output='{"speech": []}',
        peak_gpu_memory_bytes=2048,
        peak_rss_bytes=4096,
    )

    job = recorder.get(JOB)
    assert job is not None
    assert (job.output, job.peak_gpu_memory_bytes, job.peak_rss_bytes) == (
        '{"speech": []}',
        2048,
        4096,
    )
    view = job.status_view()
    assert view.result is not None
    assert view.result.output == {"speech": []}
    assert view.error_kind is None
    # the last event is the hash as it is now, output and all
    last = r.xrevrange(events_key(JOB), count=1)[0][1]
    assert last[b"output"] == b'{"speech": []}'


@pytest.mark.parametrize(
    ("status", "given", "kept"),
    [
        (Status.FAILURE, "timeout", "timeout"),
        (Status.FAILURE, None, "exception"),
        (Status.REVOKED, None, "cancelled"),
    ],
)
async def test_a_run_that_did_not_succeed_keeps_how_it_ended(
    store: JobStore,
    recorder: JobRecorder,
    r: redis.Redis,
    settings: Settings,
    status: Status,
    given: Any,
    kept: str,
) -> None:
    await created(store, settings)
    recorder.start(JOB, "token-1", "cpu@test", 0)

    assert recorder.finish(JOB, "token-1", status, charge=None, owner=OWNER, error_kind=given)

    assert r.hget(job_key(JOB), "error_kind") == kept.encode()
    assert r.hget(METRICS, f"ended:vad:{kept}") == b"1"


@pytest.mark.parametrize("status", [Status.SUCCESS, Status.FAILURE, Status.REVOKED])
async def test_a_run_given_a_charge_is_billed_whatever_its_end(
    store: JobStore, recorder: JobRecorder, r: redis.Redis, settings: Settings, status: Status
) -> None:
    await created(store, settings)
    recorder.start(JOB, "token-1", "cpu@test", 0)
    charge = pricing.price(settings, "short", 3.0)

    assert recorder.finish(JOB, "token-1", status, charge=charge, owner=OWNER)

    [record] = bills_of(r, OWNER)
    assert (record.task_id, record.cost_micros) == (JOB, 1_500_000)


async def test_a_run_given_no_charge_is_not_billed(
    store: JobStore, recorder: JobRecorder, r: redis.Redis, settings: Settings
) -> None:
    await created(store, settings)
    recorder.start(JOB, "token-1", "cpu@test", 0)

    assert recorder.finish(JOB, "token-1", Status.FAILURE, charge=None, owner=OWNER)

    assert len(bills_of(r, OWNER)) == 0
