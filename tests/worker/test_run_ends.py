"""How a run's end is recorded through the worker's real step (a trigger's run: the lease that
starts the job, the step that ends, bills and acks it): a failure of the worker's own at any
step after the job returns still ends the job, `internal`; a run that lost its lease ends
nothing and bills nothing; a bill never exceeds the job's budget (a run past it is a timeout)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from app import pricing
from app.jobs import JobContext, job
from app.store import JobRecorder
from app.store.keys import job_key
from app.store.recorder import INTERNAL_ERROR
from app.worker import ends as ends_module
from app.worker import runner as runner_module
from app.worker.inline import InlineExecutor
from app.worker.reports import LiveReports
from tests.support import bills_of
from tests.worker.support import ALICE, Nothing, Worker

SERVICES: list[Any] = []  # the test's service, for the job types below that act on it
RELEASED: set[str] = set()  # the jobs whose first run gave its lease away


@job(name="leaves-a-file", max_duration_s=30)
def leaves_a_file(ctx: JobContext, inp: Nothing) -> Nothing:
    """Succeeds, and leaves one artifact."""
    (ctx.output_dir / "out.txt").write_text("kept\n")
    return Nothing()


@job(name="loses-its-lease", max_duration_s=30)
def loses_its_lease(ctx: JobContext, inp: Nothing) -> Nothing:
    """Its first run's lease goes back to the queue mid-run, as a lease that expired while its
    worker was frozen is reclaimed; the run then ends well all the same."""
    if ctx.task_id not in RELEASED:
        RELEASED.add(ctx.task_id)
        service = SERVICES[0]
        token = service.recorder.redis.hget(job_key(ctx.task_id), "token").decode()
        assert service.queues["short"].release(ctx.task_id, token)
    return Nothing()


@job(name="overruns", max_duration_s=30)
def overruns(ctx: JobContext, inp: Nothing) -> Nothing:
    """Runs 0.6 s, past its budget and the tolerance (the in-process executor kills nothing)."""
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        pass  # the job's work is to take its time
    return Nothing()


@job(name="handed-back", max_duration_s=30)
def handed_back(ctx: JobContext, inp: Nothing) -> Nothing:
    """Its first run is handed back as a worker's shutdown grace runs out (the timer's call,
    made at once); its rerun ends well."""
    if ctx.task_id not in RELEASED:
        RELEASED.add(ctx.task_id)
        SERVICES[0].runner._hand_back()
        ctx.check_cancelled()
    return Nothing()


TYPES = [leaves_a_file, loses_its_lease, overruns, handed_back]


@pytest.fixture
def make_worker(worker: Callable[..., Worker], tmp_path: Path) -> Callable[..., Worker]:
    def make(**settings: object) -> Worker:
        made = worker(drain=True, types=TYPES, artifacts_dir=tmp_path, **settings)
        SERVICES[:] = [made.service]
        RELEASED.clear()
        return made

    return make


def ended(r: redis.Redis, name: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in r.hgetall(job_key(name)).items()}


def fails(exc: Exception) -> Callable[..., Any]:
    def raising(*args: object, **kwargs: object) -> Any:
        raise exc

    return raising


def first_call_fails(real: Callable[..., Any], exc: Exception) -> Callable[..., Any]:
    calls: list[object] = []

    def once(*args: object, **kwargs: object) -> Any:
        calls.append(args)
        if len(calls) == 1:
            raise exc
        return real(*args, **kwargs)

    return once


# each step after the job returns, and the executor itself, failing for a reason of its own
STEPS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "the executor": lambda m: m.setattr(InlineExecutor, "run", fails(OSError("no space left"))),
    "the last reports": lambda m: m.setattr(LiveReports, "close", fails(RuntimeError("bug"))),
    "the artifacts' walk": lambda m: m.setattr(
        runner_module, "store_outputs", fails(FileNotFoundError("out.txt went away"))
    ),
    "the artifacts' count": lambda m: m.setattr(
        JobRecorder, "count_artifact_bytes", fails(redis.ResponseError("OOM"))
    ),
    "the end's own fields": lambda m: m.setattr(ends_module, "_tflops", fails(KeyError("x"))),
    "the end's arguments": lambda m: m.setattr(
        JobRecorder, "end_args", first_call_fails(JobRecorder.end_args, TypeError("bug"))
    ),
}


@pytest.mark.parametrize("step", list(STEPS))
def test_a_failure_of_the_worker_after_the_run_still_ends_the_job_internal_billed_once(
    make_worker: Callable[..., Worker],
    r: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
) -> None:
    w = make_worker()
    STEPS[step](monkeypatch)
    w.submit(r, "short", "J1", job_type="leaves-a-file", duration_s=5)
    w.trigger("short")
    job = ended(r, "J1")
    assert (job["status"], job["error_kind"], job["error"]) == (
        "FAILURE",
        "internal",
        INTERNAL_ERROR,
    )
    assert "artifacts" not in job and "output" not in job
    assert [b.task_id for b in bills_of(r, ALICE)] == ["J1"]  # billed by the rule, once
    assert w.service.queues["short"].pending() == 0  # and only then acked


def test_a_failure_to_price_the_run_ends_the_job_internal_unbilled(
    make_worker: Callable[..., Worker], r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = make_worker()
    monkeypatch.setattr(pricing, "price", fails(ArithmeticError("bug")))
    w.submit(r, "short", "J1", job_type="leaves-a-file", duration_s=5)
    w.trigger("short")
    assert (ended(r, "J1")["status"], ended(r, "J1")["error_kind"]) == ("FAILURE", "internal")
    assert bills_of(r, ALICE) == []
    assert w.service.queues["short"].pending() == 0


def test_a_run_that_lost_its_lease_ends_nothing_and_its_rerun_is_billed_once(
    make_worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = make_worker()
    w.submit(r, "short", "J1", job_type="loses-its-lease", duration_s=5)
    w.trigger("short")  # the drain runs the job twice: the lease went back to the front
    job = ended(r, "J1")
    assert (job["status"], job["attempts"]) == ("SUCCESS", "2")
    [bill] = bills_of(r, ALICE)
    assert bill.task_id == "J1"
    assert w.service.queues["short"].pending() == 0


def test_a_bill_never_exceeds_the_jobs_budget(
    make_worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = make_worker(min_billed_s=0.01)
    w.submit(r, "short", "J1", job_type="overruns", duration_s=0.05)
    w.trigger("short")
    job = ended(r, "J1")
    assert (job["status"], job["error_kind"]) == ("FAILURE", "timeout")  # the grace is no work
    [bill] = bills_of(r, ALICE)
    assert bill.billed_seconds == 0.05  # what admission held, not the 0.6 s it ran
    assert bill.gpu_seconds >= 0.6  # the seconds it ran are on the bill
    assert bill.description.endswith("(billed its budget of 0.05 s)")


def test_a_handed_back_run_is_no_attempt_even_when_another_worker_starts_the_job_at_once(
    make_worker: Callable[..., Worker], r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker leases the job in the instant its lease is back in the queue, and starts
    it: that start must find the handed-back run's attempt given back already."""
    w = make_worker()
    queue, recorder = w.service.queues["short"], w.service.recorder
    starts: list[int] = []
    real_release = type(queue).release

    def release_then_another_starts(self: Any, task_id: str, token: str) -> bool:
        released = real_release(self, task_id, token)
        lease = self.dequeue()
        assert lease is not None and lease.task_id == task_id
        started = recorder.start(task_id, lease.token, "other@host", None)
        starts.append(started.attempt)
        assert real_release(self, task_id, lease.token)  # and hands it back, for this worker
        assert recorder.handed_back(task_id, lease.token)
        return bool(released)

    monkeypatch.setattr(type(queue), "release", release_then_another_starts)
    w.submit(r, "short", "J1", job_type="handed-back", duration_s=5)
    w.trigger("short")
    monkeypatch.undo()
    w.trigger("short")
    assert starts == [1]  # the other worker's start was the job's first counted attempt
    job = ended(r, "J1")
    assert (job["status"], job["attempts"]) == ("SUCCESS", "1")
    assert [b.task_id for b in bills_of(r, ALICE)] == ["J1"]
