"""Every script that ends a job hands its webhook to the sender, in the same step as the end:
the job's id goes on the deliveries stream once, whichever script ends it, and never for a job
without a webhook."""

from __future__ import annotations

import pytest

from app.models import Status
from app.settings import Settings
from app.store import JobRecorder
from app.store.keys import job_key
from tests.webhooks.conftest import TOKEN, Jobs

pytestmark = pytest.mark.anyio
HOOK = "http://127.0.0.1:9/hook"


async def test_a_finished_job_is_handed_over_once_with_its_url_in_the_job(jobs: Jobs) -> None:
    job_id = await jobs.create(HOOK)
    assert jobs.handed_over() == []  # not before its end

    assert jobs.start(job_id)
    assert jobs.handed_over() == []
    assert jobs.finish(job_id, Status.SUCCESS, output='{"x": 1}')

    assert jobs.handed_over() == [job_id]
    assert jobs.recorder.redis.hget(job_key(job_id), "webhook") == HOOK.encode()
    assert not jobs.finish(job_id, Status.FAILURE)  # refused: it has ended
    assert jobs.handed_over() == [job_id]


@pytest.mark.parametrize("status", [Status.FAILURE, Status.REVOKED])
async def test_a_failed_or_cancelled_run_is_handed_over(jobs: Jobs, status: Status) -> None:
    job_id = await jobs.create(HOOK)
    jobs.start(job_id)
    assert jobs.finish(job_id, status, error="boom")

    assert jobs.handed_over() == [job_id]


async def test_a_job_without_a_webhook_is_never_handed_over(jobs: Jobs) -> None:
    done, cancelled = await jobs.create(None), await jobs.create(None)
    jobs.start(done)
    jobs.finish(done, Status.SUCCESS)
    await jobs.store.revoke(cancelled)

    assert jobs.handed_over() == []
    assert jobs.recorder.redis.hget(job_key(done), "webhook") is None


async def test_a_cancelled_queued_job_is_handed_over_once(jobs: Jobs) -> None:
    job_id = await jobs.create(HOOK)

    assert await jobs.store.revoke(job_id) == "revoked"
    assert await jobs.store.revoke(job_id) == "REVOKED"
    assert await jobs.store.revoke(job_id, "operator") == "REVOKED"

    assert jobs.handed_over() == [job_id]


async def test_an_operators_stop_hands_over_and_the_stale_run_adds_nothing(jobs: Jobs) -> None:
    job_id = await jobs.create(HOOK)
    jobs.start(job_id)

    assert await jobs.store.revoke(job_id, "operator") == "stopped"
    assert not jobs.finish(job_id, Status.SUCCESS)

    assert jobs.handed_over() == [job_id]


async def test_an_owners_cancel_hands_over_only_when_the_run_ends(jobs: Jobs) -> None:
    job_id = await jobs.create(HOOK)
    jobs.start(job_id)

    assert await jobs.store.revoke(job_id) == "stopping"
    assert jobs.handed_over() == []
    assert jobs.finish(job_id, Status.REVOKED)
    assert jobs.handed_over() == [job_id]


async def test_a_job_that_used_its_attempts_is_handed_over(jobs: Jobs, settings: Settings) -> None:
    recorder = JobRecorder(jobs.recorder.redis, settings.model_copy(update={"max_attempts": 1}))
    job_id = await jobs.create(HOOK)
    assert recorder.start(job_id, TOKEN, "cpu@test", None).run

    lost = recorder.start(job_id, "next-lease", "cpu@test", None)  # its worker was lost

    assert lost.reason == "exhausted"
    assert jobs.handed_over() == [job_id]
    assert recorder.start(job_id, "third", "cpu@test", None).reason == "ended"
    assert jobs.handed_over() == [job_id]


async def test_a_job_cancelled_while_its_run_was_lost_is_handed_over(jobs: Jobs) -> None:
    job_id = await jobs.create(HOOK)
    jobs.start(job_id)
    assert await jobs.store.revoke(job_id) == "stopping"

    # its worker died before it could stop it: the next lease finds it cancelled
    assert jobs.recorder.start(job_id, "next-lease", "cpu@test", None).reason == "ended"

    assert jobs.handed_over() == [job_id]
