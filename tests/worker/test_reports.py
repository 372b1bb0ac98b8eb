"""What a running job says, written to Redis by the runner: every log line in the job's log
stream, throttled `log` and `progress` events in its event stream, the latest progress in its
hash, and on success the files it left, stored as artifacts and listed at its finish.

Jobs run in this process (InlineExecutor) on the real Redis, with a local folder as the
artifact store; tests/jobs/test_child.py has the same jobs in the warm child, prints included.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from app.auth import Accounts
from app.jobs import load_registry
from app.settings import Settings
from app.store.keys import METRICS, events_key, job_key, logs_key
from app.wiring.service import Service
from app.worker.calls import Call, Ended, never
from app.worker.inline import InlineExecutor
from app.worker.live import JobEvents, LogLine
from app.worker.reports import EVENT_LINES, LiveReports
from app.worker.runner import build_worker
from tests.support import bills_of
from tests.worker.support import FIXTURES, OWNER, new_job


class KeepingExecutor(InlineExecutor):
    """InlineExecutor that remembers each job's output folder, to see that it is deleted."""

    folders: list[Path | None]

    def run(
        self,
        call: Call,
        should_stop: Callable[[], bool],
        events: JobEvents,
        should_yield: Callable[[], bool] = never,
    ) -> Ended:
        ended = super().run(call, should_stop, events, should_yield)
        self.folders.append(ended.output_dir)
        return ended


@dataclass
class Worker:
    service: Service
    store: Path  # the artifact store's folder
    folders: list[Path | None]  # the jobs' output folders (in process only)

    def run(self, r: redis.Redis, job_id: str, job_type: str, inp: dict[str, Any]) -> str:
        token = new_job(self.service, r, job_id, 5.0, job_type, json.dumps(inp))
        return self.service.runner.run("short", job_id, token)


@pytest.fixture
def make_worker(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """The worker side on the test Redis, running tests.jobs.sample in this process, its
    artifacts in a folder of the test's."""
    built: list[Service] = []

    def make(**overrides: Any) -> Worker:
        store = tmp_path / "artifacts"
        options: dict[str, Any] = {
            "redis_url": redis_url,
            "users_file": FIXTURES,
            "heartbeat_seconds": 0.05,
            "lease_seconds": 5,
            "artifacts_dir": store,
        }
        settings = Settings(**{**options, **overrides})
        executor = KeepingExecutor(load_registry(["tests.jobs.sample"], entry_points=False))
        executor.folders = []
        service = build_worker(settings, Accounts.load(FIXTURES), executor=executor)[0]
        built.append(service)
        return Worker(service, store, executor.folders)

    yield make
    for service in built:
        service.close()


@pytest.fixture
def child_worker(redis_url: str, tmp_path: Path) -> Iterator[Worker]:
    """The worker side as a worker runs it: jobs in the warm child process."""
    settings = Settings(
        redis_url=redis_url,
        users_file=FIXTURES,
        heartbeat_seconds=0.05,
        lease_seconds=5,
        artifacts_dir=tmp_path / "artifacts",
        job_modules=["tests.jobs.sample"],
    )
    service, runner = build_worker(settings, Accounts.load(FIXTURES))
    yield Worker(service, tmp_path / "artifacts", [])
    runner.executor.close()
    service.close()


def events(r: redis.Redis, job_id: str) -> list[dict[str, str]]:
    """The job's event stream, oldest first, each entry's fields as text."""
    entries = r.xrange(events_key(job_id))
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]


def reports(r: redis.Redis, job_id: str, kind: str) -> list[Any]:
    """The data of the job's events of one kind (progress, log), oldest first."""
    return [json.loads(e["data"]) for e in events(r, job_id) if e.get("event") == kind]


def logged(r: redis.Redis, job_id: str) -> list[tuple[str, str]]:
    """(stream, text) of every line of the job's log stream."""
    entries = r.xrange(logs_key(job_id))
    return [(fields[b"stream"].decode(), fields[b"text"].decode()) for _, fields in entries]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_jobs_lines_progress_and_files_are_recorded(
    make_worker: Callable[..., Worker], r: redis.Redis
) -> None:
    worker = make_worker()
    assert worker.run(r, "job-1", "chatty", {"lines": 30, "files": 3}) == "done"
    assert logged(r, "job-1") == [("log", f"log {n}") for n in range(30)]
    assert 0 < r.ttl(logs_key("job-1")) <= worker.service.settings.job_ttl_s
    # the events' lines are the log's, in order, or counted as left out
    log_events = reports(r, "job-1", "log")
    shown = [line["text"] for event in log_events for line in event["lines"]]
    assert len(shown) + sum(event["dropped"] for event in log_events) == 30
    assert shown == sorted(shown, key=lambda text: int(text.split()[1]))
    assert all(line["stream"] == "log" for event in log_events for line in event["lines"])
    latest = {"fraction": 1.0, "message": "line 30 of 30"}
    assert reports(r, "job-1", "progress")[-1] == latest
    assert json.loads(r.hget(job_key("job-1"), "progress") or "") == latest
    assert events(r, "job-1")[-1]["status"] == "SUCCESS"  # after every report
    expected = [
        {"name": name, "size": 7, "sha256": sha256(f"file {n}\n".encode())}
        for n, name in [(0, "file-0.txt"), (2, "file-2.txt"), (1, "sub/file-1.txt")]
    ]
    assert json.loads(r.hget(job_key("job-1"), "artifacts") or "") == expected
    assert (worker.store / "job-1" / "sub" / "file-1.txt").read_text() == "file 1\n"
    assert float(r.hget(METRICS, "artifact_bytes") or 0) == 21
    assert worker.folders[-1] is not None
    assert not worker.folders[-1].exists()


def test_the_throttle_batches_lines_and_counts_what_it_leaves_out(
    make_worker: Callable[..., Worker], r: redis.Redis
) -> None:
    """One event at the first line; the next is due only after 1000 s, so the rest wait for the
    job's end, where the newest EVENT_LINES of them go in one event."""
    worker = make_worker(log_events_per_s=0.001)
    assert worker.run(r, "job-2", "chatty", {"lines": 200, "files": 0}) == "done"
    assert len(logged(r, "job-2")) == 200  # the log stream has every line
    seen = [([x["text"] for x in e["lines"]], e["dropped"]) for e in reports(r, "job-2", "log")]
    left_out = 199 - EVENT_LINES
    assert seen == [(["log 0"], 0), ([f"log {n}" for n in range(150, 200)], left_out)]
    assert float(r.hget(METRICS, "log_lines_dropped") or 0) == left_out
    assert json.loads(r.hget(job_key("job-2"), "artifacts") or "") == []


def test_files_over_the_cap_fail_the_job(
    make_worker: Callable[..., Worker], r: redis.Redis
) -> None:
    worker = make_worker(max_artifact_bytes=1000)
    assert worker.run(r, "job-3", "hoarder", {"bytes": 5000}) == "failed: exception"
    job = worker.service.recorder.get("job-3")
    assert job is not None
    assert (job.status, job.error_kind) == ("FAILURE", "exception")
    assert "5000 bytes" in (job.error or "")
    assert "limit of 1000 bytes (MAX_ARTIFACT_BYTES)" in (job.error or "")
    assert not r.hexists(job_key("job-3"), "artifacts")
    assert not r.hexists(job_key("job-3"), "output")
    assert not (worker.store / "job-3").exists()
    assert len(bills_of(r, OWNER)) == 1  # it ran: billed as a failure
    assert worker.folders[-1] is not None
    assert not worker.folders[-1].exists()


def test_files_within_the_cap_are_kept(make_worker: Callable[..., Worker], r: redis.Redis) -> None:
    worker = make_worker(max_artifact_bytes=1000)
    assert worker.run(r, "job-4", "hoarder", {"bytes": 1000}) == "done"
    artifacts = [{"name": "big.bin", "size": 1000, "sha256": sha256(bytes(1000))}]
    assert json.loads(r.hget(job_key("job-4"), "artifacts") or "") == artifacts


def test_a_job_that_fails_keeps_no_files(
    make_worker: Callable[..., Worker], r: redis.Redis
) -> None:
    worker = make_worker()
    assert worker.run(r, "job-5", "fail", {}) == "failed: exception"
    assert not r.hexists(job_key("job-5"), "artifacts")
    assert worker.folders[-1] is not None
    assert not worker.folders[-1].exists()


def test_a_stale_run_writes_no_reports(make_worker: Callable[..., Worker], r: redis.Redis) -> None:
    service = make_worker().service
    recorder = service.recorder
    new_job(service, r, "job-6")
    recorder.start("job-6", "stale", "cpu1@h", None)
    recorder.start("job-6", "fresh", "cpu2@h", None)  # the job was reclaimed and restarted
    lines = [LogLine(1.0, "log", "from the stale run")]
    assert not recorder.log("job-6", "stale", lines, event=lines, dropped=3)
    assert not recorder.progress("job-6", "stale", 0.5, "stale")
    assert not r.exists(logs_key("job-6"))
    assert [e for e in events(r, "job-6") if "event" in e] == []
    assert not r.hexists(job_key("job-6"), "progress")
    assert not r.hexists(METRICS, "log_lines_dropped")
    # the run that holds the job writes
    assert recorder.log("job-6", "fresh", lines, event=lines, dropped=3)
    assert recorder.progress("job-6", "fresh", 0.5, "fresh")
    assert logged(r, "job-6") == [("log", "from the stale run")]
    assert reports(r, "job-6", "log") == [
        {"lines": [{"at": 1.0, "stream": "log", "text": "from the stale run"}], "dropped": 3}
    ]
    assert reports(r, "job-6", "progress") == [{"fraction": 0.5, "message": "fresh"}]


def test_progress_is_throttled_and_the_latest_is_written_last(
    make_worker: Callable[..., Worker], r: redis.Redis
) -> None:
    service = make_worker().service
    token = new_job(service, r, "job-7")
    assert service.recorder.start("job-7", token, "cpu1@h", None).run
    now = [0.0]  # the throttle's clock, moved by the test
    live = LiveReports(service.recorder, "job-7", token, log_events_per_s=4, clock=lambda: now[0])
    for n in range(1, 4):
        live.progress(n / 10, f"step {n}")
    assert [x["message"] for x in reports(r, "job-7", "progress")] == ["step 1"]
    live.lines([])  # a poll with no news writes nothing while progress is not due
    assert len(reports(r, "job-7", "progress")) == 1
    now[0] = 1.0
    live.lines([])  # now it is: the held-back progress goes
    live.progress(0.9, "step 9")  # and the next waits again
    live.close()
    assert [x["message"] for x in reports(r, "job-7", "progress")] == ["step 1", "step 3", "step 9"]
    assert json.loads(r.hget(job_key("job-7"), "progress") or "")["message"] == "step 9"


@pytest.mark.integration
def test_a_job_in_the_warm_child_has_its_prints_in_the_log(
    child_worker: Worker, r: redis.Redis
) -> None:
    assert child_worker.run(r, "job-8", "chatty", {"lines": 3, "files": 1}) == "done"
    lines = logged(r, "job-8")
    for stream, word in [("log", "log"), ("stdout", "out"), ("stderr", "err")]:
        assert [text for s, text in lines if s == stream] == [f"{word} {n}" for n in range(3)]
    shown = sum(len(e["lines"]) + e["dropped"] for e in reports(r, "job-8", "log"))
    assert shown == 9
    assert reports(r, "job-8", "progress")[-1] == {"fraction": 1.0, "message": "line 3 of 3"}
    artifacts = json.loads(r.hget(job_key("job-8"), "artifacts") or "")
    assert [x["name"] for x in artifacts] == ["file-0.txt"]
    assert (child_worker.store / "job-8" / "file-0.txt").read_text() == "file 0\n"
