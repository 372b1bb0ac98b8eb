"""A preempted run through the worker's real step (the runner, the queues and the store, in
process): a run asked to yield is put back in line (PENDING, not an attempt, its seconds kept)
and its worker runs the job it yielded to at once, leased by name; the preempted job resumes
and is billed once for all its runs; a run that raises JobPreemptedError unasked fails."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from app.jobs import JobContext, JobPreemptedError, job
from app.models import Kind
from app.store.keys import ask_key, asked_for_key, job_key
from tests.support import bills_of, wait_for
from tests.worker.support import ALICE, BOB, Nothing, Worker

ORDER: list[str] = []  # the runs, in order: "<job>:<run's preemptions>"


@job(name="yields-once", max_duration_s=30, preemptible=True)
def yields_once(ctx: JobContext, inp: Nothing) -> Nothing:
    """Its first run asks itself to yield to OWED (as the policy would) and waits for the ask,
    leaving a checkpoint; its second run finds the checkpoint and ends."""
    ORDER.append(f"{ctx.task_id}:{ctx.preemptions}")
    mark = ctx.checkpoint_dir / "first-run"
    if ctx.preemptions == 0:
        mark.write_text("done")
        client = redis.Redis.from_url(REDIS_URL[0])
        client.set(ask_key(ctx.task_id), f"OWED {OWED_QUEUE[0]}")
        client.set(asked_for_key("OWED"), ctx.task_id)
        client.close()
        wait_for(lambda: ctx.preempted, 10, "the ask")
        ctx.check_preempted()
    assert mark.read_text() == "done"  # the first run's checkpoint is there
    return Nothing()


@job(name="owed", max_duration_s=30)
def owed(ctx: JobContext, inp: Nothing) -> Nothing:
    ORDER.append(f"{ctx.task_id}:owed")
    return Nothing()


@job(name="yields-unasked", max_duration_s=30, preemptible=True)
def yields_unasked(ctx: JobContext, inp: Nothing) -> Nothing:
    raise JobPreemptedError("nobody asked")


REDIS_URL: list[str] = []
OWED_QUEUE: list[str] = ["short"]


@pytest.fixture
def make_worker(
    worker: Callable[..., Worker], tmp_path: Path, redis_url: str
) -> Callable[..., Worker]:
    def make() -> Worker:
        REDIS_URL[:] = [redis_url]
        ORDER.clear()
        types = [yields_once, owed, yields_unasked]
        return worker(drain=True, types=types, artifacts_dir=tmp_path, heartbeat_seconds=0.1)

    return make


def record(r: redis.Redis, job_id: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in r.hgetall(job_key(job_id)).items()}


@pytest.mark.parametrize("owed_queue", ["short", "long"])
def test_a_run_asked_to_yield_goes_back_in_line_and_its_worker_runs_the_owed_job_at_once(
    make_worker: Callable[..., Worker], r: redis.Redis, owed_queue: Kind
) -> None:
    """The owed job may be in the other queue of a worker that serves both."""
    w = make_worker()
    OWED_QUEUE[:] = [owed_queue]
    w.submit(r, "short", "J1", job_type="yields-once", duration_s=20)
    r.hset(job_key("J1"), "preemptible", "1")  # what the API writes for a preemptible type
    w.submit(r, "short", "AHEAD", owner=BOB, job_type="owed", duration_s=1)
    w.submit(r, owed_queue, "OWED", owner=BOB, job_type="owed", duration_s=1)
    w.service.queues["short"].promote("J1")  # J1 first; OWED is not next in line
    w.trigger("short")

    # OWED ran right after the yield, though AHEAD was ahead of it: it was leased by name
    assert ORDER[:2] == ["J1:0", "OWED:owed"]
    assert sorted(ORDER[2:]) == ["AHEAD:owed", "J1:1"]
    j1 = record(r, "J1")
    assert (j1["status"], j1["attempts"], j1["preemptions"]) == ("SUCCESS", "1", "1")
    [bill] = bills_of(r, ALICE)
    assert bill.task_id == "J1" and "over 2 runs" in bill.description
    assert sorted(b.task_id for b in bills_of(r, BOB)) == ["AHEAD", "OWED"]
    assert not r.exists(ask_key("J1"), asked_for_key("OWED"))  # the ask is answered
    for queue in w.service.queues.values():
        assert queue.pending() == 0 and queue.length() == 0


def test_a_run_that_raises_job_preempted_error_unasked_fails(
    make_worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = make_worker()
    w.submit(r, "short", "J1", job_type="yields-unasked", duration_s=5)
    r.hset(job_key("J1"), "preemptible", "1")
    w.trigger("short")
    j1 = record(r, "J1")
    assert (j1["status"], j1["error_kind"]) == ("FAILURE", "exception")  # as any exception
    assert j1["error"].startswith("JobPreemptedError: nobody asked")
    assert j1.get("preemptions") is None and [b.task_id for b in bills_of(r, ALICE)] == ["J1"]
