"""The job runner, in process, on a real Redis: how runs start, end, fail and are billed.

Jobs run in this process (InlineExecutor) so that a test's job type can act on the test's Redis
mid-run; tests/jobs and tests/e2e run them in the warm child process."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis
from pydantic import BaseModel

from app.auth import Accounts
from app.jobs import JobContext, JobType, Registry, job, load_registry
from app.models import Status
from app.pricing import price
from app.settings import Settings
from app.store import JobRecorder
from app.store.keys import job_key
from app.wiring.service import Service, job_weight
from app.worker.inline import InlineExecutor
from app.worker.runner import build_worker
from tests.support import bills_of
from tests.worker.support import FIXTURES, OWNER, new_job

REDIS: list[redis.Redis] = []  # the test's client, for the job types below that act on Redis


class Nothing(BaseModel):
    """No input, no output."""


@job(name="broken")
def broken(ctx: JobContext, inp: Nothing) -> Nothing:
    raise RuntimeError("CUDA error: out of memory")


@job(name="cancelled-midway", max_duration_s=30)
def cancelled_midway(ctx: JobContext, inp: Nothing) -> Nothing:
    """Its owner cancels it while it runs (the mark revoke.lua writes); it stops when told."""
    REDIS[0].hset(job_key(ctx.task_id), "cancel", "owner")
    while not ctx.cancelled:
        pass  # the runner looks at the mark once per heartbeat (0.05 s here)
    ctx.check_cancelled()
    return Nothing()


@job(name="dropped-midway", max_duration_s=30)
def dropped_midway(ctx: JobContext, inp: Nothing) -> Nothing:
    """An admin drops its queue while it runs, as the API's drop does."""
    SERVICE[0].queues["short"].drop("short")
    REDIS[0].hset(job_key(ctx.task_id), mapping={"status": "REVOKED", "cancel": "operator"})
    while not ctx.cancelled:
        pass  # its heartbeat finds the lease gone
    ctx.check_cancelled()
    return Nothing()


SERVICE: list[Service] = []
TEST_TYPES: list[JobType] = [broken, cancelled_midway, dropped_midway]


@pytest.fixture
def make_service(redis_url: str, r: redis.Redis) -> Iterator[Callable[..., Service]]:
    """Build the service's worker side on the test Redis, running jobs in this process; closed
    after the test."""
    built: list[Service] = []
    REDIS[:] = [r]

    def make() -> Service:
        settings = Settings(
            redis_url=redis_url,
            users_file=FIXTURES,
            max_attempts=2,
            heartbeat_seconds=0.05,
            lease_seconds=5,
        )
        registry = Registry([*load_registry().types(), *TEST_TYPES])
        executor = InlineExecutor(registry)
        built.append(build_worker(settings, Accounts.load(FIXTURES), executor=executor)[0])
        SERVICE[:] = built[-1:]
        return built[-1]

    yield make
    for service in built:
        service.close()


def test_a_job_runs_and_is_billed_once(
    make_service: Callable[..., Service], r: redis.Redis
) -> None:
    service = make_service()
    token = new_job(service, r, "job-1")
    assert service.runner.run("short", "job-1", token) == "done"
    job = service.recorder.get("job-1")
    assert job is not None and (job.status, job.attempts) == ("SUCCESS", 1)
    assert len(bills_of(r, OWNER)) == 1
    # A second run of the same delivery (a redelivered trigger) finds the job ended.
    assert service.runner.run("short", "job-1", token) == "ended"
    assert len(bills_of(r, OWNER)) == 1


def test_a_job_that_raises_fails_with_the_error_and_is_billed_for_its_time(
    make_service: Callable[..., Service], r: redis.Redis
) -> None:
    service = make_service()
    token = new_job(service, r, "job-2", job_type="broken")
    assert service.runner.run("short", "job-2", token) == "failed: exception"
    job = service.recorder.get("job-2")
    assert job is not None and job.status == "FAILURE"
    assert job.error_kind == "exception"
    assert "RuntimeError: CUDA error: out of memory" in (job.error or "")
    # it held the GPU: billed what it ran, at least the 1 s floor
    records = bills_of(r, OWNER)
    assert [(x.task_id, x.billed_seconds) for x in records] == [("job-2", 1.0)]


def test_a_job_whose_runs_keep_dying_fails_after_the_attempt_limit(
    make_service: Callable[..., Service], r: redis.Redis
) -> None:
    service = make_service()
    new_job(service, r, "job-3")
    recorder: JobRecorder = service.recorder
    assert recorder.start("job-3", "run-1", "cpu1@h", None).attempt == 1  # this run dies
    assert recorder.start("job-3", "run-2", "cpu2@h", None).attempt == 2  # and this one
    third = recorder.start("job-3", "run-3", "cpu3@h", None)
    assert (third.run, third.reason) == (False, "exhausted")
    job = recorder.get("job-3")
    assert job is not None and job.status == "FAILURE"
    assert "lost 2 times" in (job.error or "")
    assert len(bills_of(r, OWNER)) == 0


def test_a_stale_run_cannot_finish_or_bill(
    make_service: Callable[..., Service], r: redis.Redis
) -> None:
    service = make_service()
    new_job(service, r, "job-4")
    recorder = service.recorder
    recorder.start("job-4", "stale", "cpu1@h", None)
    recorder.start("job-4", "fresh", "cpu2@h", None)  # the job was reclaimed and restarted
    bill = price(service.runner.settings, "short", 1.0)
    assert not recorder.finish("job-4", "stale", Status.SUCCESS, charge=bill, owner=OWNER)
    assert len(bills_of(r, OWNER)) == 0
    assert recorder.finish("job-4", "fresh", Status.SUCCESS, charge=bill, owner=OWNER)
    assert not recorder.finish("job-4", "fresh", Status.SUCCESS, charge=bill, owner=OWNER)
    assert len(bills_of(r, OWNER)) == 1


@pytest.mark.parametrize(
    ("duration", "weight"),
    [(0.2, 1000), (1.0, 1000), (1.01, 1010), (1.5, 1500), (2.0001, 2001), (3000, 3_000_000)],
)
def test_job_weight_is_its_gpu_milliseconds_at_least_one_second(
    duration: float, weight: int
) -> None:
    assert job_weight(duration) == weight


def test_a_running_job_cancelled_by_its_owner_is_revoked_and_billed_for_its_time(
    make_service: Callable[..., Service], r: redis.Redis
) -> None:
    service = make_service()
    token = new_job(service, r, "job-5", duration_s=30, job_type="cancelled-midway")
    assert service.runner.run("short", "job-5", token) == "cancelled"
    job = service.recorder.get("job-5")
    assert job is not None and (job.status, job.error_kind) == ("REVOKED", "cancelled")
    records = [x.record() for x in bills_of(r, OWNER)]
    assert [(x.task_id, x.billed_seconds, x.cost) for x in records] == [("job-5", 1.0, 0.5)]
    assert "cancelled after" in records[0].description


def test_a_running_job_whose_queue_was_dropped_ends_revoked_and_unbilled(
    make_service: Callable[..., Service], r: redis.Redis
) -> None:
    """An admin's drop deletes the lease and ends the job REVOKED, an operator's stop: the run
    sees it stop (its heartbeat finds the lease gone), bills nothing, and cannot end it again."""
    service = make_service()
    token = new_job(service, r, "job-7", duration_s=30, job_type="dropped-midway")
    assert service.runner.run("short", "job-7", token) == "stopped by an operator"
    job = service.recorder.get("job-7")
    assert job is not None and job.status == "REVOKED"
    assert len(bills_of(r, OWNER)) == 0


def test_a_job_cancelled_while_its_run_was_lost_ends_without_running(
    make_service: Callable[..., Service], r: redis.Redis
) -> None:
    service = make_service()
    token = new_job(service, r, "job-6")
    r.hset(job_key("job-6"), mapping={"status": "STARTED", "cancel": 1})  # the lost run's state
    assert service.runner.run("short", "job-6", token) == "ended"
    job = service.recorder.get("job-6")
    assert job is not None and job.status == "REVOKED"
    assert len(bills_of(r, OWNER)) == 0


def test_the_end_of_a_run_is_recorded_once_redis_answers_again(
    make_service: Callable[..., Service],
) -> None:
    runner = make_service().runner
    replies: list[Exception | bool] = [redis.ConnectionError("down"), redis.TimeoutError(), True]

    def finish() -> bool:
        reply = replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    assert runner._finish({}, finish) is True
    assert replies == []


def test_a_failure_that_is_not_redis_being_away_is_not_retried(
    make_service: Callable[..., Service],
) -> None:
    runner = make_service().runner
    calls: list[int] = []

    def finish() -> bool:
        calls.append(1)
        raise redis.ResponseError("WRONGTYPE")

    with pytest.raises(redis.ResponseError):
        runner._finish({}, finish)
    assert len(calls) == 1
