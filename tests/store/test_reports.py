"""The reading side of a job's reports, on the suite's Redis: the latest progress and a
success's artifacts in its record, the progress and log entries of its event stream next to the
copies of the job, and its log lines, written as the contract in app/store/keys.py says."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio as aioredis

from app.models import Artifact, LogLine, Progress, Status
from app.settings import Settings
from app.store import JobRecord, JobStore
from app.store.keys import events_key, logs_key
from app.store.record import JobEvent
from tests.api.helpers import USERS_FILE

pytestmark = pytest.mark.anyio
OWNER = "11111111-1111-1111-1111-111111111111"
JOB = "0b7d2f6e-0000-4000-8000-000000000002"
HASH = {
    "task_id": JOB,
    "owner": OWNER,
    "kind": "short",
    "status": "SUCCESS",
    "duration_s": "5.0",
    "enqueued_at": "100.0",
    "started_at": "101.0",
    "finished_at": "106.0",
}


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[JobStore]:
    client = aioredis.Redis.from_url(redis_url)
    yield JobStore(client, Settings(redis_url=redis_url, users_file=USERS_FILE))
    await client.aclose()


def test_a_record_shows_its_progress_and_a_success_its_artifacts() -> None:
    listed = [{"name": "a/b.bin", "size": 3, "sha256": "0" * 64}]
    record = JobRecord.parse(
        {
            **HASH,
            "progress": json.dumps({"fraction": 1, "message": "done"}),
            "artifacts": json.dumps(listed),
        }
    )

    view = record.status_view()

    assert view.progress == Progress(fraction=1.0, message="done")
    assert view.result is not None
    assert view.result.artifacts == [Artifact(name="a/b.bin", size=3, sha256="0" * 64)]


@pytest.mark.parametrize("artifacts", ["", "{}", '[{"name": "x"}]', "not json"])
def test_a_malformed_artifact_list_reads_as_none(artifacts: str) -> None:
    view = JobRecord.parse({**HASH, "artifacts": artifacts}).status_view()

    assert view.result is not None
    assert view.result.artifacts is None


def test_a_record_without_reports_has_neither() -> None:
    view = JobRecord.parse({**HASH, "status": Status.STARTED}).status_view()

    assert view.progress is None
    assert view.result is not None
    assert view.result.artifacts is None


async def test_events_are_the_job_s_copies_and_its_reports_in_order(
    store: JobStore, r: redis.Redis
) -> None:
    first = r.xadd(events_key(JOB), {**HASH, "status": "STARTED"})
    progress = r.xadd(events_key(JOB), {"event": "progress", "data": '{"fraction": 0.5}'})
    log = r.xadd(events_key(JOB), {"event": "log", "data": '{"lines": [], "dropped": 0}'})
    last = r.xadd(events_key(JOB), HASH)

    events = await store.events_after(JOB, "0")

    written = [x.decode() for x in (first, progress, log, last)]
    assert [event_id for event_id, _ in events] == written
    kinds = [type(event) for _, event in events]
    assert kinds == [JobRecord, JobEvent, JobEvent, JobRecord]
    assert events[1][1] == JobEvent("progress", '{"fraction": 0.5}')
    assert events[2][1] == JobEvent("log", '{"lines": [], "dropped": 0}')
    assert [e for _, e in await store.events_after(JOB, progress.decode())] == [
        events[2][1],
        events[3][1],
    ]


async def test_logs_are_the_last_lines_oldest_first(store: JobStore, r: redis.Redis) -> None:
    for i in range(5):
        r.xadd(logs_key(JOB), {"at": f"{i}.5", "stream": "stdout", "text": f"line {i}"})

    assert await store.logs(JOB, 2) == [
        LogLine(at=3.5, stream="stdout", text="line 3"),
        LogLine(at=4.5, stream="stdout", text="line 4"),
    ]
    assert [line.text for line in await store.logs(JOB, 100)] == [f"line {i}" for i in range(5)]
    assert await store.logs("0b7d2f6e-0000-4000-8000-00000000ffff", 10) == []
