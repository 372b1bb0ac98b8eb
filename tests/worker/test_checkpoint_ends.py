"""A preemptible job's checkpoint ends with the job, through the worker's real step (the runner,
the queues and the store, in process): removed once its end is recorded, whatever the end, on
the step's path and on the runner's own; and bounded by MAX_CHECKPOINT_BYTES."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from app.artifacts import CHECKPOINTS
from app.jobs import JobContext, job
from app.store.keys import job_key
from tests.support import bills_of
from tests.worker.support import ALICE, Nothing, Worker, new_job


@job(name="saves", max_duration_s=30, preemptible=True)
def saves(ctx: JobContext, inp: Nothing) -> Nothing:
    """Checkpoints 100 bytes, then ends as its task id says: J-fail raises."""
    (ctx.checkpoint_dir / "state.bin").write_bytes(b"s" * 100)
    if ctx.task_id.endswith("fail"):
        raise RuntimeError("it failed after checkpointing")
    return Nothing()


@pytest.fixture
def make_worker(worker: Callable[..., Worker], tmp_path: Path) -> Callable[..., Worker]:
    def make(**settings: object) -> Worker:
        return worker(drain=True, types=[saves], artifacts_dir=tmp_path, **settings)

    return make


def preemptible(w: Worker, r: redis.Redis, job_id: str) -> None:
    w.submit(r, "short", job_id, job_type="saves", duration_s=5)
    r.hset(job_key(job_id), "preemptible", "1")  # what the API writes for a preemptible type


def status_of(r: redis.Redis, job_id: str) -> str:
    return str(r.hget(job_key(job_id), "status"), "utf-8")


@pytest.mark.parametrize(("job_id", "status"), [("J-ok", "SUCCESS"), ("J-fail", "FAILURE")])
def test_a_job_s_checkpoint_goes_once_its_end_is_recorded(
    make_worker: Callable[..., Worker], r: redis.Redis, tmp_path: Path, job_id: str, status: str
) -> None:
    w = make_worker()
    preemptible(w, r, job_id)
    w.trigger("short")
    assert status_of(r, job_id) == status
    assert not (tmp_path / CHECKPOINTS / job_id).exists()


def test_a_run_of_the_runner_s_own_calls_removes_it_too(
    make_worker: Callable[..., Worker], r: redis.Redis, tmp_path: Path
) -> None:
    """A lease without the hooks' start (a retry's, the job a preempted run yielded to)."""
    w = make_worker()
    token = new_job(w.service, r, "J-own", duration_s=5, job_type="saves")
    r.hset(job_key("J-own"), "preemptible", "1")
    runner = w.service.runner
    assert runner is not None
    assert runner.run("short", "J-own", token) == "done"
    assert not (tmp_path / CHECKPOINTS / "J-own").exists()


def test_a_run_that_leaves_more_than_max_checkpoint_bytes_fails_the_job(
    make_worker: Callable[..., Worker], r: redis.Redis, tmp_path: Path
) -> None:
    w = make_worker(max_checkpoint_bytes=50)
    preemptible(w, r, "J-big")
    w.trigger("short")
    fields = {k.decode(): v.decode() for k, v in r.hgetall(job_key("J-big")).items()}
    assert (fields["status"], fields["error_kind"]) == ("FAILURE", "exception")
    assert "MAX_CHECKPOINT_BYTES" in fields["error"]
    assert [b.task_id for b in bills_of(r, ALICE)] == ["J-big"]  # billed as any failure
    assert not (tmp_path / CHECKPOINTS / "J-big").exists()
