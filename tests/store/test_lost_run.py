"""A lost run through the store's hook on the fair queues' reclaim (hooks.lua `reclaimed`,
runs.lua lose_run): once a run's lease lapses and is reclaimed, its job is PENDING at once,
with no worker, back at the front of its account's line, in the same call; the lost run stays
an attempt; the stale run can write nothing more; an ended job is left alone. A lost run is
billed up to its last checkpoint the worker noted (checkpointed.lua): its seconds join the
earlier runs', and the charge for them is billed if the job ends without another run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aioredis

from app import pricing
from app.auth import Accounts
from app.ledger.outbox import unwritten
from app.models import Status
from app.settings import Settings
from app.store.jobs import JobStore
from app.store.keys import MOVES, events_key, job_key
from app.store.record import decode
from app.store.recorder import RunEnd
from app.store.submit import NewJob
from app.vtrr import VTRRQueue
from app.vtrr.step import step
from app.wiring.service import Service, build
from tests.store.support import write_job
from tests.support import wait_for

pytestmark = pytest.mark.anyio
OWNER = "11111111-1111-1111-1111-111111111111"
JOB = "0b7d2f6e-0000-4000-8000-000000000038"
LATER = "0b7d2f6e-0000-4000-8000-000000000039"


@pytest.fixture
def service(settings: Settings) -> Iterator[Service]:
    built = build(settings, Accounts.load(settings.users_file))
    built.hooks.for_worker("gpu0@a", 0)
    yield built
    built.close()


async def queue_jobs(settings: Settings, *job_ids: str) -> None:
    client = aioredis.Redis.from_url(settings.redis_url)
    for job_id in job_ids:
        await write_job(client, settings, OWNER, NewJob(job_id, "long", 100.0))
    await client.aclose()


def lease(q: VTRRQueue) -> tuple[str, str]:
    """Lease the next job as a worker's step does (its start in the same call): id, token."""
    stepped = step([q])
    assert stepped.lease is not None
    return stepped.lease.task_id, stepped.lease.token


def lapse(q: VTRRQueue, job_id: str, token: str) -> None:
    assert q.extend(job_id, token, 1e-6)


def job(r: redis.Redis, job_id: str = JOB) -> dict[str, str]:
    return decode(r.hgetall(job_key(job_id)))


async def test_a_lost_run_s_job_is_pending_with_no_worker_as_soon_as_it_is_reclaimed(
    service: Service, settings: Settings, r: redis.Redis
) -> None:
    await queue_jobs(settings, JOB, LATER)
    q = service.queues["long"]
    job_id, token = lease(q)
    assert job_id == JOB and job(r)["status"] == "STARTED"
    moves = r.pubsub()
    moves.subscribe(MOVES)
    lapse(q, JOB, token)
    assert q.reclaim() == 1
    fields = job(r)
    assert (fields["status"], fields["attempts"]) == ("PENDING", "1")  # a lost run is an attempt
    assert not {"token", "worker", "gpu_id", "started_at"} & set(fields)
    last = r.xrevrange(events_key(JOB), count=1)[0][1]
    assert decode(last)["status"] == "PENDING"  # the streams hear it at once
    assert q.position(JOB) == 0  # at the front of its account's line, before LATER
    heard = wait_for(lambda: moves.get_message(ignore_subscribe_messages=True), what="a move")
    assert heard is not None and heard["data"] == b"long"
    moves.close()


async def test_its_next_run_starts_it_again_as_another_attempt(
    service: Service, settings: Settings, r: redis.Redis
) -> None:
    await queue_jobs(settings, JOB)
    q = service.queues["long"]
    _, token = lease(q)
    lapse(q, JOB, token)
    job_id, again = lease(q)  # the step reclaims, then leases and starts it
    fields = job(r)
    assert job_id == JOB and again != token
    assert (fields["status"], fields["attempts"], fields["token"]) == ("STARTED", "2", again)


async def test_the_stale_run_writes_nothing_to_the_job_s_record(
    service: Service, settings: Settings, r: redis.Redis
) -> None:
    await queue_jobs(settings, JOB)
    q = service.queues["long"]
    _, token = lease(q)
    lapse(q, JOB, token)
    assert q.reclaim() == 1
    before = job(r)
    recorder = service.recorder
    charge = pricing.price(settings, "long", 5.0, budget_s=100.0)
    end = RunEnd(job_id=JOB, owner=OWNER, status=Status.SUCCESS, charge=charge, seconds=5.0)
    assert not recorder.record_end(token, end)
    assert not recorder.progress(JOB, token, 0.5, "half")
    assert not recorder.began(JOB, token)  # nor move its started_at
    assert not recorder.preempted(JOB, token, 5.0, charge)
    assert job(r) == before
    assert not q.ack(JOB, token)


async def test_an_ended_job_whose_lease_lapsed_is_left_as_it_ended(
    service: Service, settings: Settings, r: redis.Redis
) -> None:
    await queue_jobs(settings, JOB)
    q = service.queues["long"]
    _, token = lease(q)
    charge = pricing.price(settings, "long", 5.0, budget_s=100.0)
    end = RunEnd(job_id=JOB, owner=OWNER, status=Status.SUCCESS, charge=charge, seconds=5.0)
    assert service.recorder.record_end(token, end)  # recorded, but its ack never came
    lapse(q, JOB, token)
    assert q.reclaim() == 1
    assert job(r)["status"] == "SUCCESS"


async def test_a_lost_run_is_billed_up_to_its_last_noted_checkpoint(
    service: Service, settings: Settings, r: redis.Redis
) -> None:
    await queue_jobs(settings, JOB)
    q = service.queues["long"]
    _, token = lease(q)
    recorder = service.recorder
    assert recorder.checkpointed(JOB, token, 2.5, pricing.price(settings, "long", 2.5))
    assert recorder.checkpointed(JOB, token, 3.3, pricing.price(settings, "long", 3.3))
    lapse(q, JOB, token)
    assert q.reclaim() == 1
    fields = job(r)
    assert (float(fields["ran_s"]), fields["ran_runs"]) == (3.3, "1")
    assert "checkpoint_s" not in fields and "checkpoint_bill" not in fields
    assert not recorder.checkpointed(JOB, token, 9.0, pricing.price(settings, "long", 9.0))

    _, again = lease(q)  # the rerun learns them, as a resumed run learns a preempted one's
    rerun = recorder.start(JOB, again, "gpu0@a", 0)  # (its start again, as a retry's: same)
    assert (rerun.ran_s, rerun.ran_runs) == (3.3, 1)
    lapse(q, JOB, again)  # lost again, before any checkpoint: nothing more to bill
    assert q.reclaim() == 1
    assert (float(job(r)["ran_s"]), job(r)["ran_runs"]) == (3.3, "1")

    client = aioredis.Redis.from_url(settings.redis_url)
    assert await JobStore(client, settings).revoke(JOB) == "revoked"  # ends without a run
    await client.aclose()
    [bill] = unwritten(r)
    assert (bill.task_id, bill.gpu_seconds) == (JOB, 3.3)  # the lost run's checkpointed work


async def test_a_run_that_ends_is_billed_for_its_own_seconds_and_its_note_goes(
    service: Service, settings: Settings, r: redis.Redis
) -> None:
    await queue_jobs(settings, JOB)
    q = service.queues["long"]
    _, token = lease(q)
    recorder = service.recorder
    assert recorder.checkpointed(JOB, token, 2.0, pricing.price(settings, "long", 2.0))
    charge = pricing.price(settings, "long", 5.0, budget_s=100.0)
    end = RunEnd(job_id=JOB, owner=OWNER, status=Status.SUCCESS, charge=charge, seconds=5.0)
    assert recorder.record_end(token, end)
    fields = job(r)
    assert "checkpoint_s" not in fields and "ran_runs" not in fields
    [bill] = unwritten(r)
    assert bill.gpu_seconds == 5.0
