"""CheckpointWatch: at each heartbeat, a run whose checkpoint copy changed notes on its job, fenced
by its lease token, its seconds up to that write and the charge through them (what a lost run's
bill counts: tests/store/test_lost_run.py)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from app.auth import Accounts
from app.pricing import milliseconds
from app.settings import Settings
from app.store.keys import job_key
from app.wiring.service import Service, build
from app.worker.checkpointed import CheckpointWatch
from app.worker.ends import RunEnds
from app.worker.live import NO_EVENTS
from tests.worker.support import FIXTURES, new_job


def note(r: redis.Redis, job_id: str) -> tuple[float, dict[str, object]] | None:
    fields = r.hmget(job_key(job_id), "checkpoint_s", "checkpoint_bill")
    if fields[0] is None:
        return None
    return float(fields[0]), json.loads(fields[1] or b"{}")


@pytest.fixture
def service(redis_url: str) -> Iterator[Service]:
    built = build(Settings(redis_url=redis_url, users_file=FIXTURES), Accounts.load(FIXTURES))
    yield built
    built.close()


def started_watch(service: Service, r: redis.Redis, folder: Path | None) -> CheckpointWatch:
    """The watch of job J1's run, started now."""
    token = new_job(service, r, "J1", duration_s=30, job_type="noted")
    started = service.recorder.start("J1", token, "cpu@h", None)
    ends = RunEnds(service.settings)
    return CheckpointWatch(
        NO_EVENTS, ("short", "J1", token, started), service.recorder, ends, folder
    )


def test_a_changed_checkpoint_is_noted_at_the_next_look_and_only_then(
    service: Service, r: redis.Redis, tmp_path: Path
) -> None:
    before = time.time()
    watch = started_watch(service, r, tmp_path)
    after = time.time()
    watch.look()
    assert note(r, "J1") is None  # nothing written yet
    (tmp_path / "state.json").write_text("{}")
    written = (tmp_path / "state.json").stat().st_mtime
    watch.look()
    noted = note(r, "J1")
    assert noted is not None
    seconds, bill = noted
    assert written - after <= seconds <= written - before  # up to the write, not the look
    assert bill["billed_ms"] == milliseconds(max(seconds, service.settings.min_billed_s))
    os.utime(tmp_path / "state.json", (written - 100, written - 100))  # an older write: no news
    r.hdel(job_key("J1"), "checkpoint_s")
    watch.look()
    assert r.hget(job_key("J1"), "checkpoint_s") is None


def test_a_run_whose_job_another_run_holds_notes_nothing(
    service: Service, r: redis.Redis, tmp_path: Path
) -> None:
    watch = started_watch(service, r, tmp_path)
    service.recorder.start("J1", "the-rerun", "cpu2@h", None)  # the job's next run holds it now
    (tmp_path / "state.json").write_text("{}")
    watch.look()
    assert note(r, "J1") is None


def test_a_checkpoint_not_kept_in_place_is_not_watched(
    service: Service, r: redis.Redis, tmp_path: Path
) -> None:
    watch = started_watch(service, r, None)  # an S3 one: stored at the run's end only
    watch.look()
    assert note(r, "J1") is None
