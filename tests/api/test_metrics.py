"""GET /metrics: Prometheus text read from Redis at each scrape, with no key and no label that
names an account or a job; checked against the real app, the suite's Redis, the job scripts, and
(in one integration test) a real worker process."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from app import pricing
from app.api.collector import ENDS
from app.dev.processes import spawn, stop
from app.dev.stack import as_environment
from app.models import KINDS, ChildReplacement, Status
from app.settings import Settings
from app.store.keys import WORKERS, job_key
from app.store.workers import ALIVE_BEATS
from app.wiring.service import fairness_lag_s
from app.worker.presence import Presence
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, OWNER, SECOND, SECOND_KEY, TEAM, TEAM_KEY, Worker
from tests.support import wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): every metric is read from Redis
    when scraped, and Redis is emptied for each test."""
    return shared_api


Headers = dict[str, str]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
FAMILIES = {
    "fairgpu_jobs_queued": "gauge",
    "fairgpu_jobs_in_flight": "gauge",
    "fairgpu_jobs_held_by_limit": "gauge",
    "fairgpu_fairness_lag_seconds": "gauge",
    "fairgpu_queue_reclaims": "counter",
    "fairgpu_jobs_finished": "counter",
    "fairgpu_jobs_ended": "counter",
    "fairgpu_job_attempts": "counter",
    "fairgpu_job_preemptions": "counter",
    "fairgpu_billed_cost": "counter",
    "fairgpu_billed_gpu_seconds": "counter",
    "fairgpu_job_wait_seconds": "histogram",
    "fairgpu_job_run_seconds": "histogram",
    "fairgpu_worker_last_heartbeat_timestamp_seconds": "gauge",
    "fairgpu_workers": "gauge",
    "fairgpu_api_open_streams": "gauge",
    "fairgpu_log_lines_dropped": "counter",
    "fairgpu_artifact_bytes": "counter",
    "fairgpu_webhooks_delivered": "counter",
    "fairgpu_webhooks_failed": "counter",
    "fairgpu_webhooks_given_up": "counter",
    "fairgpu_child_replacements": "counter",
    "fairgpu_worker_broken": "gauge",
}
PER_PROCESS = "fairgpu_api_open_streams"


async def scrape(api: Api, headers: Headers | None = None) -> Samples:
    """GET /metrics (no key unless given), parsed by Prometheus's own parser."""
    response = await api.client.get("/metrics", headers=headers or {})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"{key} appears twice"
            samples[key] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


async def submit(api: Api, key: Headers = KEY, kind: str = "short", duration_s: float = 5) -> str:
    response = await api.client.post(
        "/enqueue-task", json={"kind": kind, "duration_s": duration_s}, headers=key
    )
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


# -- the format -----------------------------------------------------------------------------------
async def test_metrics_need_no_key_and_parse_as_prometheus_text(api: Api) -> None:
    response = await api.client.get("/metrics")
    assert response.status_code == 200
    families = {f.name: f.type for f in text_string_to_metric_families(response.text)}
    assert families == FAMILIES
    assert await scrape(api, {"X-API-Key": "no_such_key"}) == await scrape(api)


async def test_child_replacements_by_reason_and_broken_workers_are_reported(
    api: Api, worker: Worker
) -> None:
    samples = await scrape(api)
    assert all(
        value(samples, "fairgpu_child_replacements_total", reason=r) == 0
        for r in get_args(ChildReplacement)
    )
    for reason in ("gpu_leak", "gpu_leak", "cuda_error"):
        worker.recorder.count_child_replacement(reason)
    fine = Presence(worker.recorder.redis, "gpu0@box", ["short"], 10)
    broken = Presence(worker.recorder.redis, "gpu1@box", ["short"], 10)
    fine.beat()
    broken.broken("CUDA error: unknown error")
    samples = await scrape(api)
    assert value(samples, "fairgpu_child_replacements_total", reason="gpu_leak") == 2
    assert value(samples, "fairgpu_child_replacements_total", reason="cuda_error") == 1
    assert value(samples, "fairgpu_worker_broken", worker="gpu0@box") == 0
    assert value(samples, "fairgpu_worker_broken", worker="gpu1@box") == 1
    assert value(samples, "fairgpu_workers", queue="short") == 1  # the broken one runs nothing
    broken.stop()
    fine.stop()
    assert value(await scrape(api), "fairgpu_worker_broken", worker="gpu1@box") == 1  # kept


async def test_a_fresh_service_reports_zeros_for_every_queue(api: Api) -> None:
    samples = await scrape(api)
    for kind in KINDS:
        assert value(samples, "fairgpu_jobs_queued", queue=kind) == 0
        assert value(samples, "fairgpu_jobs_in_flight", queue=kind) == 0
        assert value(samples, "fairgpu_fairness_lag_seconds", queue=kind) == 0
        assert value(samples, "fairgpu_workers", queue=kind) == 0
        assert value(samples, "fairgpu_job_attempts_total", queue=kind) == 0
        assert value(samples, "fairgpu_job_wait_seconds_count", queue=kind) == 0
        for status in ("SUCCESS", "FAILURE", "REVOKED"):
            assert value(samples, "fairgpu_jobs_finished_total", queue=kind, status=status) == 0
    assert value(samples, PER_PROCESS) == 0


# -- what the counters count ----------------------------------------------------------------------
async def test_the_queued_gauge_matches_what_was_submitted(api: Api) -> None:
    for key in (KEY, KEY, SECOND_KEY):
        await submit(api, key)
    await submit(api, TEAM_KEY, kind="long", duration_s=100)

    samples = await scrape(api)
    assert value(samples, "fairgpu_jobs_queued", queue="short") == 3
    assert value(samples, "fairgpu_jobs_queued", queue="long") == 1

    assert api.runtime.service.queues["short"].dequeue() is not None
    samples = await scrape(api)
    assert value(samples, "fairgpu_jobs_queued", queue="short") == 2
    assert value(samples, "fairgpu_jobs_in_flight", queue="short") == 1


async def test_the_fairness_lag_gauge_is_the_queues_own_figure(api: Api) -> None:
    for _ in range(4):
        await submit(api, KEY, duration_s=20)
    await submit(api, SECOND_KEY, duration_s=1)
    api.runtime.service.queues["short"].dequeue()
    api.runtime.service.queues["short"].dequeue()

    samples = await scrape(api)
    for kind in KINDS:
        expected = fairness_lag_s(api.runtime.service.queues[kind])
        assert value(samples, "fairgpu_fairness_lag_seconds", queue=kind) == expected
    # in GPU-seconds, within the longest job queued (20 s) as a fair queue keeps it
    assert 0 < value(samples, "fairgpu_fairness_lag_seconds", queue="short") <= 20


async def test_a_cancelled_job_counts_once_as_revoked(api: Api, worker: Worker) -> None:
    queued = await submit(api)
    running = await submit(api)
    token = worker.lease()  # the first job (fair order among one account's jobs is arrival)
    worker.start(queued, token)

    assert (await api.client.delete(f"/tasks/{running}", headers=KEY)).status_code == 200
    samples = await scrape(api)
    assert value(samples, "fairgpu_jobs_finished_total", queue="short", status="REVOKED") == 1

    # A running job asked to stop counts when its run ends, not when it is asked.
    assert (await api.client.delete(f"/tasks/{queued}", headers=KEY)).status_code == 202
    samples = await scrape(api)
    assert value(samples, "fairgpu_jobs_finished_total", queue="short", status="REVOKED") == 1
    charge = pricing.price(api.runtime.settings, "short", 1.0, end="cancelled")
    assert worker.recorder.finish(queued, token, Status.REVOKED, charge=charge, owner=OWNER)

    samples = await scrape(api)
    assert value(samples, "fairgpu_jobs_finished_total", queue="short", status="REVOKED") == 2
    assert value(samples, "fairgpu_jobs_finished_total", queue="short", status="SUCCESS") == 0
    assert value(samples, "fairgpu_billed_cost_total", queue="short") == charge.cost
    assert value(samples, "fairgpu_job_run_seconds_count", queue="short") == 1
    assert value(samples, "fairgpu_job_wait_seconds_count", queue="short") == 1


async def test_a_success_moves_each_counter_by_its_amount(api: Api, worker: Worker) -> None:
    before = await scrape(api)
    task_id = await submit(api, SECOND_KEY, kind="long", duration_s=40)
    await asyncio.to_thread(worker.run, task_id, "long")

    after = await scrape(api)
    charge = worker.charge("long", 40)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("fairgpu_jobs_finished_total", queue="long", status="SUCCESS") == 1
    assert moved("fairgpu_job_attempts_total", queue="long") == 1
    assert moved("fairgpu_job_wait_seconds_count", queue="long") == 1
    assert moved("fairgpu_job_run_seconds_count", queue="long") == 1
    assert moved("fairgpu_billed_cost_total", queue="long") == pytest.approx(charge.cost)
    assert moved("fairgpu_billed_gpu_seconds_total", queue="long") == pytest.approx(40)
    assert moved("fairgpu_jobs_finished_total", queue="short", status="SUCCESS") == 0
    assert moved("fairgpu_job_run_seconds_count", queue="short") == 0
    # Each histogram's buckets are cumulative and end with its count.
    for name in ("fairgpu_job_wait_seconds", "fairgpu_job_run_seconds"):
        buckets = sorted(
            (float(dict(labels)["le"]), v)
            for (sample, labels), v in after.items()
            if sample == f"{name}_bucket" and dict(labels)["queue"] == "long"
        )
        counts = [v for _, v in buckets]
        assert counts == sorted(counts)
        assert counts[-1] == value(after, f"{name}_count", queue="long") == 1


async def test_a_retried_job_counts_each_attempt_and_one_wait(api: Api, worker: Worker) -> None:
    task_id = await submit(api)
    first = worker.lease()
    worker.start(task_id, first)
    assert api.runtime.service.queues["short"].release(task_id, first)  # its run was lost
    worker.run(task_id)

    samples = await scrape(api)
    assert value(samples, "fairgpu_job_attempts_total", queue="short") == 2
    assert value(samples, "fairgpu_job_wait_seconds_count", queue="short") == 1
    assert value(samples, "fairgpu_jobs_finished_total", queue="short", status="SUCCESS") == 1


# -- workers --------------------------------------------------------------------------------------
async def test_a_live_heartbeat_counts_a_worker_for_the_queues_it_serves(
    api: Api, r: redis.Redis
) -> None:
    every = api.runtime.settings.heartbeat_seconds
    short_only = Presence(r, "gpu0@box", ["short"], every)
    both = Presence(r, "gpu1@box", ["short", "long"], every)
    short_only.beat()
    both.beat()
    (seconds, micros) = r.time()
    stale = (seconds + micros / 1e6) - (ALIVE_BEATS + 1) * every
    r.hset(WORKERS, "gpu2@box", f'{{"queues": ["long"], "seen": {stale}}}')

    samples = await scrape(api)
    assert value(samples, "fairgpu_workers", queue="short") == 2
    assert value(samples, "fairgpu_workers", queue="long") == 1  # the stale one is not counted
    beat = value(samples, "fairgpu_worker_last_heartbeat_timestamp_seconds", worker="gpu2@box")
    assert beat == pytest.approx(stale)

    both.stop()
    samples = await scrape(api)
    assert value(samples, "fairgpu_workers", queue="short") == 1
    assert value(samples, "fairgpu_workers", queue="long") == 0
    names = {
        dict(labels)["worker"]
        for (name, labels) in samples
        if name == "fairgpu_worker_last_heartbeat_timestamp_seconds"
    }
    assert names == {"gpu0@box", "gpu2@box"}


# -- a real worker process ------------------------------------------------------------------------
@pytest.fixture
def worker_process(settings: Settings, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """A real fairgpu worker (`python -m app.worker`, its main(), heartbeats and all) serving
    the short queue on the suite's Redis; stopped with SIGTERM after the test."""
    name = "cpu-metrics@test"
    env = {
        **os.environ,
        **as_environment(settings),
        "WORKER_NAME": name,
        "WORKER_QUEUES": "short",
        "CUDA_VISIBLE_DEVICES": "",
        "LOG_FORMAT": "text",
    }
    process = spawn([sys.executable, "-m", "app.worker.main"], env, tmp_path / "worker.log")
    try:
        yield name, process
    finally:
        stop(process, grace_s=30)


@pytest.mark.integration
async def test_a_job_run_by_a_real_worker_moves_the_metrics(
    api: Api, r: redis.Redis, worker_process: tuple[str, Any]
) -> None:
    name, process = worker_process
    await asyncio.to_thread(
        wait_for, lambda: process.poll() is not None or r.hexists(WORKERS, name), 60, "a heartbeat"
    )
    assert process.poll() is None, "the worker exited"
    before = await scrape(api)
    assert value(before, "fairgpu_workers", queue="short") == 1
    assert value(before, "fairgpu_workers", queue="long") == 0
    assert (
        "fairgpu_worker_last_heartbeat_timestamp_seconds",
        frozenset({("worker", name)}),
    ) in before

    task_id = await submit(api, SECOND_KEY, duration_s=0.3)

    def ended() -> bool:
        return r.hget(job_key(task_id), "status") in (b"SUCCESS", b"FAILURE", b"REVOKED")

    await asyncio.to_thread(wait_for, ended, 60, "the job to end")
    assert r.hget(job_key(task_id), "status") == b"SUCCESS"
    # The record ends before the worker acks the fair queue (late ack), so the lease may
    # still be out for a moment after SUCCESS.
    inflight = api.runtime.queues["short"].keys.inflight
    await asyncio.to_thread(wait_for, lambda: r.zcard(inflight) == 0, 30, "the lease to be acked")
    after = await scrape(api)

    def moved(metric: str, **labels: str) -> float:
        return value(after, metric, **labels) - value(before, metric, **labels)

    charge = pricing.price(api.runtime.settings, "short", 0.3)
    assert moved("fairgpu_jobs_finished_total", queue="short", status="SUCCESS") == 1
    assert moved("fairgpu_job_wait_seconds_count", queue="short") == 1
    assert moved("fairgpu_job_run_seconds_count", queue="short") == 1
    assert moved("fairgpu_job_run_seconds_sum", queue="short") > 0
    assert moved("fairgpu_job_attempts_total", queue="short") == 1
    assert moved("fairgpu_billed_cost_total", queue="short") == pytest.approx(charge.cost)
    # a 0.3 s job is billed the 1 s minimum (MIN_BILLED_S)
    assert moved("fairgpu_billed_gpu_seconds_total", queue="short") == charge.billed_seconds == 1
    assert value(after, "fairgpu_jobs_in_flight", queue="short") == 0

    # A worker that stops says goodbye: it is no longer counted.
    process.send_signal(signal.SIGTERM)
    await asyncio.to_thread(process.wait, 30)
    assert not r.hexists(WORKERS, name)
    assert value(await scrape(api), "fairgpu_workers", queue="short") == 0


# -- bounded labels, and every API process agrees --------------------------------------------------
async def busy_service(api: Api, worker: Worker) -> set[str]:
    """Jobs of every account in every state; their ids."""
    ids = {await submit(api, key) for key in (KEY, SECOND_KEY, TEAM_KEY)}
    ids.add(done := await submit(api, TEAM_KEY, kind="long", duration_s=30))
    await asyncio.to_thread(worker.run, done, "long")
    ids.add(cancelled := await submit(api, SECOND_KEY))
    assert (await api.client.delete(f"/tasks/{cancelled}", headers=SECOND_KEY)).status_code == 200
    running = worker.lease()
    [started] = [t for t in ids if r_status(worker, t) == "PENDING" and in_flight(api, t)]
    worker.start(started, running)
    Presence(worker.client, "gpu3@box", ["short", "long"], 10).beat()
    return ids


def r_status(worker: Worker, task_id: str) -> str:
    job = worker.recorder.get(task_id)
    assert job is not None
    return job.status


def in_flight(api: Api, task_id: str) -> bool:
    queue = api.runtime.service.queues["short"]
    return queue.has(task_id) and queue.position(task_id) is None


async def test_no_label_names_an_account_or_a_job(api: Api, worker: Worker) -> None:
    ids = await busy_service(api, worker)
    samples = await scrape(api)

    secret = ids | {OWNER, SECOND, TEAM, "default_api_key", "second_api_key", "team_api_key"}
    allowed = {
        "queue": set(KINDS),
        "status": {"SUCCESS", "FAILURE", "REVOKED"},
        "le": {*(str(b) for b in range(10000)), "0.1", "0.5", "+Inf"},
        "worker": {"gpu3@box"},
        # a job's type is one registered here, or "other"; its end one of a fixed few
        "type": {t.name for t in api.runtime.job_types.types()} | {"other"},
        "end": set(ENDS),
        "reason": set(get_args(ChildReplacement)),  # why a worker replaced its job child
    }
    for name, labels in samples:
        for label, text in labels:
            assert not any(s in text for s in secret), f"{name} has {label}={text}"
            assert text in allowed[label], f"{name} has {label}={text}"


async def test_two_api_processes_on_one_redis_report_the_same_values(
    api: Api, worker: Worker, settings: Settings
) -> None:
    ids = await busy_service(api, worker)
    pending = next(t for t in ids if r_status(worker, t) == "PENDING" and not in_flight(api, t))
    owner_key = {OWNER: KEY, SECOND: SECOND_KEY, TEAM: TEAM_KEY}[
        getattr(worker.recorder.get(pending), "owner", "")
    ]
    async with (
        open_api(settings) as other,
        api.stream.stream("GET", f"/task-status/stream/{pending}", headers=owner_key) as stream,
    ):
        assert stream.status_code == 200
        await asyncio.to_thread(
            wait_for, lambda: api.runtime.hub.streams == 1, 5, "the stream to be counted"
        )
        mine, theirs = await scrape(api), await scrape(other)
        assert value(mine, PER_PROCESS) == 1
        assert value(theirs, PER_PROCESS) == 0

    def shared(samples: Samples) -> Samples:
        return {k: v for k, v in samples.items() if k[0] != PER_PROCESS}

    assert shared(mine) == shared(theirs)
    assert value(mine, "fairgpu_jobs_finished_total", queue="long", status="SUCCESS") == 1
    assert value(mine, "fairgpu_jobs_in_flight", queue="short") == 1


async def test_a_foreign_heartbeat_entry_breaks_neither_metrics_nor_status(
    api: Api, r: redis.Redis
) -> None:
    task_id = await submit(api)
    r.hset(WORKERS, "odd@box", "[1, 2]")

    assert value(await scrape(api), "fairgpu_workers", queue="short") == 0
    response = await api.client.get(f"/task-status/{task_id}", headers=KEY)
    assert response.status_code == 200, response.text


async def test_every_metric_the_docs_name_is_one_the_api_serves(api: Api) -> None:
    # A counter is queried as <name>_total (the exposition's name), never by its family's name.
    text = (await api.client.get("/metrics")).text
    served: set[str] = set()
    for family in text_string_to_metric_families(text):
        suffixes = {"counter": ["_total"], "histogram": ["", "_bucket", "_sum", "_count"]}
        served |= {family.name + suffix for suffix in suffixes.get(family.type, [""])}
    root = Path(__file__).resolve().parents[2]
    docs = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    docs += sorted((root / "deploy").rglob("*.y*ml"))
    for doc in docs:
        named = set(re.findall(r"\bfairgpu_[a-z_]+[a-z]", doc.read_text()))
        assert named <= served, f"{doc.name}: {sorted(named - served)}"
