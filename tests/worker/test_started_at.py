"""A run starts when its job starts: a job's started_at is the moment the worker's child said the
job began (its type set up), by Redis's clock, not the moment its lease was taken. With
CHILD_PER_JOB every job waits for a fresh child to start and import the job types; that wait is
nobody's run, and the status, the CLI, the dashboard and a run's measured time must not see it.
The worker side as a worker runs it, in process, with its real warm child."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from app.auth import Accounts
from app.settings import Settings
from app.store import JobRecorder
from app.wiring.service import Service
from app.worker.runner import build_worker
from tests.worker.support import FIXTURES, new_job

pytestmark = pytest.mark.integration  # it spawns job children


@pytest.fixture
def per_job_worker(redis_url: str, tmp_path: Path) -> Iterator[Service]:
    settings = Settings(
        redis_url=redis_url,
        users_file=FIXTURES,
        heartbeat_seconds=0.05,
        lease_seconds=5,
        artifacts_dir=tmp_path / "artifacts",
        job_modules=["tests.jobs.sample"],
        child_per_job=True,
    )  # type: ignore[call-arg]
    service, runner = build_worker(settings, Accounts.load(FIXTURES))
    yield service
    runner.executor.close()
    service.close()


def test_a_jobs_started_at_is_after_the_start_of_the_fresh_child_it_waited_for(
    per_job_worker: Service, r: redis.Redis
) -> None:
    runner = per_job_worker.runner
    assert runner is not None
    recorder: JobRecorder = per_job_worker.recorder
    ran = []
    for job_id in ("first", "second"):  # the second waits for the child that replaced the first's
        token = new_job(per_job_worker, r, job_id, 5.0, "imported")
        assert runner.run("short", job_id, token) == "done"
        record = recorder.get(job_id)
        assert record is not None and record.output is not None
        ran.append((record, json.loads(record.output)))
    assert ran[0][1]["pid"] != ran[1][1]["pid"]  # a fresh child each
    for record, out in ran:
        assert record.started_at is not None and record.finished_at is not None
        # the child imported the job types (and then said it was ready) before the job began
        assert record.started_at >= out["imported_at"], record.task_id
        assert record.finished_at >= record.started_at
