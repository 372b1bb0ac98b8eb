"""A preempted run through the store's Lua (preempt.lua, and what start, finish and revoke do
with a job that was preempted): the job is PENDING again, its run not an attempt, its seconds
kept; its next run learns them; it is billed once at its end for all its runs, and a job that
ends without another run (cancelled while it waits, out of attempts) is billed for those it had.
"""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aioredis

from app import pricing
from app.ledger.outbox import unwritten
from app.models import Status
from app.settings import Settings
from app.store import JobRecorder
from app.store.jobs import JobStore
from app.store.keys import LEDGER, billed_key, job_key
from app.store.record import decode
from app.store.submit import NewJob
from tests.store.support import write_job

pytestmark = pytest.mark.anyio
OWNER = "11111111-1111-1111-1111-111111111111"
JOB = "0b7d2f6e-0000-4000-8000-000000000032"


@pytest.fixture
async def running(settings: Settings, r: redis.Redis) -> JobRecorder:
    """A recorder, and the job JOB (preemptible, long, 100 s) written, queued and started with
    token-1."""
    client = aioredis.Redis.from_url(settings.redis_url)
    job = NewJob(JOB, "long", 100.0, job_type="digits-train", preemptible=True)
    await write_job(client, settings, OWNER, job)
    await client.aclose()
    recorder = JobRecorder(r, settings)
    started = recorder.start(JOB, "token-1", "gpu0@a", 0)
    assert (started.run, started.preemptible, started.preemptions, started.ran_s) == (
        True,
        True,
        0,
        0.0,
    )
    return recorder


def charge(settings: Settings, seconds: float) -> pricing.Charge:
    return pricing.price(settings, "long", seconds, job_type="digits-train", budget_s=100.0)


def job(r: redis.Redis) -> dict[str, str]:
    return decode(r.hgetall(job_key(JOB)))


async def test_a_preempted_run_puts_its_job_back_in_line_without_an_attempt_or_a_bill(
    running: JobRecorder, settings: Settings, r: redis.Redis
) -> None:
    assert not running.preempted(JOB, "token-0", 5.0, charge(settings, 5.0))  # a stale run
    assert running.preempted(JOB, "token-1", 5.0, charge(settings, 5.0))
    fields = job(r)
    assert (fields["status"], fields["attempts"], fields["preemptions"]) == ("PENDING", "0", "1")
    assert float(fields["ran_s"]) == 5.0
    assert "token" not in fields and "worker" not in fields and "started_at" not in fields
    assert r.xlen(LEDGER) == 0 and not r.exists(billed_key(JOB))
    assert not running.preempted(JOB, "token-1", 5.0, charge(settings, 5.0))  # once

    again = running.start(JOB, "token-2", "gpu1@b", 1)
    assert (again.attempt, again.preemptions, again.ran_s) == (1, 1, 5.0)
    assert running.preempted(JOB, "token-2", 2.5, charge(settings, 7.5))
    third = running.start(JOB, "token-3", "gpu0@a", 0)
    assert (third.attempt, third.preemptions, third.ran_s) == (1, 2, 7.5)


async def test_the_job_is_billed_once_at_its_end_for_all_its_runs(
    running: JobRecorder, settings: Settings, r: redis.Redis
) -> None:
    assert running.preempted(JOB, "token-1", 5.0, charge(settings, 5.0))
    running.start(JOB, "token-2", "gpu1@b", 1)
    total = charge(settings, 5.0 + 3.0)  # what the worker prices: its runs' seconds summed
    assert running.finish(JOB, "token-2", Status.SUCCESS, charge=total, owner=OWNER)
    [bill] = unwritten(r)
    assert (bill.task_id, bill.gpu_seconds, bill.billed_ms) == (JOB, 8.0, 8000)
    assert "earlier_bill" not in job(r)
    assert job(r)["preemptions"] == "1"


async def test_a_preempted_job_cancelled_while_it_waits_is_billed_for_the_runs_it_had(
    running: JobRecorder, settings: Settings, r: redis.Redis
) -> None:
    assert running.preempted(JOB, "token-1", 5.0, charge(settings, 5.0))
    client = aioredis.Redis.from_url(settings.redis_url)
    store = JobStore(client, settings)
    assert await store.revoke(JOB) == "revoked"
    assert await store.revoke(JOB) == "REVOKED"  # the second cancel bills nothing more
    await client.aclose()
    [bill] = unwritten(r)
    assert (bill.task_id, bill.gpu_seconds, bill.user_id) == (JOB, 5.0, OWNER)
    assert job(r)["status"] == "REVOKED"


async def test_a_job_not_preempted_and_cancelled_while_queued_is_not_billed(
    settings: Settings, r: redis.Redis
) -> None:
    client = aioredis.Redis.from_url(settings.redis_url)
    await write_job(client, settings, OWNER, NewJob(JOB, "long", 100.0, job_type="digits-train"))
    assert await JobStore(client, settings).revoke(JOB) == "revoked"
    await client.aclose()
    assert r.xlen(LEDGER) == 0


async def test_a_preempted_job_out_of_attempts_is_billed_for_the_runs_it_had(
    running: JobRecorder, settings: Settings, r: redis.Redis
) -> None:
    assert running.preempted(JOB, "token-1", 4.0, charge(settings, 4.0))
    for n in range(settings.max_attempts):  # runs lost with their workers: each an attempt
        assert running.start(JOB, f"lost-{n}", "gpu1@b", 1).run
    assert running.start(JOB, "last", "gpu1@b", 1).reason == "exhausted"
    [bill] = unwritten(r)
    assert (bill.task_id, bill.gpu_seconds) == (JOB, 4.0)
