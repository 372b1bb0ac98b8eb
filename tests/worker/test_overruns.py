"""A run past its declared seconds, through the worker's real step (in process, InlineExecutor):
the grace is for stopping, never for work. A run that returns past its budget ends FAILURE
`timeout`, its output not kept, billed its budget; one that stops when asked at its budget
does too; one that ends on time succeeds; a resumed job with no time left ends `timeout`
without running."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from pydantic import BaseModel

from app.jobs import JobContext, job
from app.jobs.builtin.burn import burn
from app.store.keys import job_key
from app.worker.deadline import TIMEOUT_TOLERANCE_S
from tests.support import bills_of
from tests.worker.support import ALICE, Nothing, Worker

BUDGET_S = 0.2
RAN: list[str] = []  # the jobs whose run began


class Work(BaseModel):
    """What a job did: its output, which a run past its budget must not hand back."""

    steps: int


@job(name="ignores-its-budget", max_duration_s=30)
def ignores_its_budget(ctx: JobContext, inp: Nothing) -> Work:
    """Works well past its budget without looking at anything, then returns its output (within
    any grace: the in-process executor kills nothing)."""
    RAN.append(ctx.task_id)
    end = time.monotonic() + BUDGET_S + 2 * TIMEOUT_TOLERANCE_S
    steps = 0
    while time.monotonic() < end:
        steps += 1
        time.sleep(0.01)  # the job's work is to take its time
    return Work(steps=steps)


@job(name="stops-when-asked", max_duration_s=30)
def stops_when_asked(ctx: JobContext, inp: Nothing) -> Work:
    """Works until asked to stop (its budget's end is such an ask), then returns what it did."""
    RAN.append(ctx.task_id)
    steps = 0
    while not ctx.cancelled:
        steps += 1  # the job's work
        time.sleep(0.01)
    return Work(steps=steps)


@pytest.fixture
def make_worker(worker: Callable[..., Worker], tmp_path: Path) -> Callable[..., Worker]:
    def make() -> Worker:
        RAN.clear()
        types = [ignores_its_budget, stops_when_asked, burn]
        return worker(drain=True, types=types, artifacts_dir=tmp_path, min_billed_s=0.01)

    return make


def record(r: redis.Redis, job_id: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in r.hgetall(job_key(job_id)).items()}


@pytest.mark.parametrize("job_type", ["ignores-its-budget", "stops-when-asked"])
def test_a_run_that_returns_past_its_budget_ends_timeout_billed_its_budget(
    make_worker: Callable[..., Worker], r: redis.Redis, job_type: str
) -> None:
    w = make_worker()
    w.submit(r, "short", "J1", job_type=job_type, duration_s=BUDGET_S)
    w.trigger("short")
    job = record(r, "J1")
    assert (job["status"], job["error_kind"]) == ("FAILURE", "timeout")
    assert "output" not in job  # what it did in the grace is not the job's output
    assert "ran past its budget of 0.2 s" in job["error"]
    [bill] = bills_of(r, ALICE)
    assert bill.billed_seconds == BUDGET_S  # what it declared, not what it ran
    assert bill.gpu_seconds > BUDGET_S
    assert "stopped at its time limit" in bill.description


def test_a_run_that_ends_at_its_budget_succeeds(
    make_worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = make_worker()
    w.submit(r, "short", "J1", job_type="burn", duration_s=BUDGET_S)  # it ends at its deadline
    w.trigger("short")
    job = record(r, "J1")
    assert (job["status"], job.get("error_kind")) == ("SUCCESS", None), job.get("error")
    [bill] = bills_of(r, ALICE)
    assert bill.billed_seconds <= BUDGET_S


def test_a_resumed_job_with_no_time_left_ends_timeout_without_running(
    make_worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = make_worker()
    w.submit(r, "short", "J1", job_type="stops-when-asked", duration_s=5)
    # as preempt.lua leaves a job whose earlier run used up its seconds
    r.hset(job_key("J1"), mapping={"preemptions": 1, "ran_s": "5.01"})
    w.trigger("short")
    job = record(r, "J1")
    assert (job["status"], job["error_kind"]) == ("FAILURE", "timeout")
    assert "no time was left" in job["error"]
    assert RAN == []  # it did not run
    [bill] = bills_of(r, ALICE)
    assert bill.billed_seconds == 5  # its earlier runs', up to its budget
    assert w.service.queues["short"].pending() == 0
