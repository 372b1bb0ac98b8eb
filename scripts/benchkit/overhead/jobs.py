"""Throughput and dispatch gap: no-op jobs through the fair queue against plain Celery tasks.

The variants (plain Celery; the fair queue, its triggers pushed by its scripts; the fair queue
with every trigger published by Kombu) run on the same redis-server, through the same Celery app
and the same worker processes (scripts/benchkit/overhead/worker_app.py), in alternating rounds:

- throughput: a round submits n jobs at once (plain: n apply_async on one producer; fair: one
  `noop.queue()` call per 1,000 items, which also publishes the first triggers) and waits for
  their n records. Jobs/s is counted over the jobs that started after the submission had ended,
  from the first of them to the last, so the producer's own CPU does not weigh on either side.
- busy gap: within each worker process, from the end of one job (its record written) to the
  start of the next, over the same jobs;
- idle start: one job at a time to an idle worker, from just before the submit call to the
  job's start.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from app.dev.processes import stop, wait_until
from scripts.benchkit.children import celery_worker, embedded_redis, spawn
from scripts.benchkit.host import cpu_seconds, log, machine
from scripts.benchkit.overhead import worker_app
from scripts.benchkit.report import Report, Section, met
from scripts.benchkit.stats import alternate, median, percentile, ratio

VARIANTS = ("plain", "fair", "fair-published")
BATCH = 1000
IDLE_PAUSE_S = 0.02  # lets the worker finish its ack and block on the broker again
GAP_P50_MS, GAP_P99_MS, THROUGHPUT_RATIO = 2.0, 5.0, 0.9


@dataclass(frozen=True)
class Record:
    """One run of a no-op job, as the worker wrote it."""

    variant: str
    job: str
    pid: int
    start: float
    previous: str
    previous_end: float

    @classmethod
    def parse(cls, raw: bytes) -> Record:
        """A record from its text."""
        variant, job, pid, start, previous, previous_end = raw.decode().split()
        return cls(variant, job, int(pid), float(start), previous, float(previous_end))


@dataclass
class Samples:
    """What the rounds of one variant measured."""

    jobs_per_s: list[float] = field(default_factory=list)
    gaps_ms: list[float] = field(default_factory=list)
    idle_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    """How much to measure."""

    rounds: int
    jobs: int
    idle: int
    workers: int
    broker: str | None = None  # Celery's broker, when not the queue's Redis (RabbitMQ)


class Driver:
    """Submits jobs of either variant and collects their records."""

    def __init__(self, url: str, pids: Sequence[int], broker: str | None = None) -> None:
        self.app = worker_app.build(url, broker)
        # The driver publishes without RabbitMQ's confirms (fairgpu's processes wait for each):
        # a confirmed publish per plain job would make the submit, not the workers, the limit.
        options = self.app.celery.conf.broker_transport_options
        self.app.celery.conf.broker_transport_options = {**options, "confirm_publish": False}
        self.client = redis.Redis.from_url(url)
        self.pids = pids  # the workers' and redis-server's: their CPU is the jobs' cost

    def cpu(self) -> float:
        """CPU seconds the workers and redis-server have used so far."""
        return sum(cpu_seconds(pid) for pid in self.pids)

    def close(self) -> None:
        """Release the connections."""
        self.app.celery.close()
        self.app.client.close()
        self.client.close()

    def submit(self, variant: str, jobs: Sequence[str]) -> None:
        """Submit the jobs of one variant as fast as one client can."""
        if variant == "plain":
            with self.app.celery.producer_or_acquire() as producer:
                for job in jobs:
                    self.app.plain.apply_async(
                        args=(job,), queue=worker_app.PLAIN_QUEUE, producer=producer
                    )
            return
        task = self.app.fair if variant == "fair" else self.app.published
        for first in range(0, len(jobs), BATCH):
            specs = [{"id": job, "args": [job]} for job in jobs[first : first + BATCH]]
            task.queue("bench", specs)

    def collect(self, count: int, timeout: float) -> list[Record]:
        """Wait for count records, then take them off the list."""
        wait_until(lambda: int(self.client.llen(worker_app.DONE_KEY)) >= count, timeout, "jobs")
        raw: list[bytes] = self.client.lrange(worker_app.DONE_KEY, 0, -1)  # type: ignore[assignment]
        self.client.delete(worker_app.DONE_KEY)
        return [Record.parse(r) for r in raw]

    def burst(self, variant: str, tag: str, n: int, samples: Samples) -> None:
        """One throughput round: n jobs at once; adds its jobs/s and busy gaps."""
        jobs = [f"{tag}-{i}" for i in range(n)]
        cpu_before = self.cpu()
        self.submit(variant, jobs)
        submitted = time.time()
        records = self.collect(n, timeout=30 + n / 20)
        samples.cpu_ms.append((self.cpu() - cpu_before) * 1e3 / n)
        late = [r for r in records if r.start >= submitted]
        starts = sorted(r.start for r in late)
        if len(starts) >= 2:
            samples.jobs_per_s.append((len(starts) - 1) / (starts[-1] - starts[0]))
        mine = set(jobs)
        samples.gaps_ms += [
            (r.start - r.previous_end) * 1e3
            for r in late
            if r.previous in mine and r.previous_end >= submitted
        ]

    def idle(self, variant: str, tag: str, n: int, samples: Samples) -> None:
        """n single jobs, each submitted to an idle worker; adds their submit-to-start times."""
        for i in range(n):
            time.sleep(IDLE_PAUSE_S)  # the worker goes back to waiting on the broker
            sent = time.time()
            self.submit(variant, [f"{tag}-idle-{i}"])
            (record,) = self.collect(1, timeout=30)
            samples.idle_ms.append((record.start - sent) * 1e3)


def start_workers(
    url: str, count: int, logs: Path, broker: str | None = None
) -> list[subprocess.Popen[bytes]]:
    """Start count benchmark workers and wait until each has run a plain job."""
    env = {worker_app.URL_ENV: url, "CUDA_VISIBLE_DEVICES": ""}
    if broker:
        env[worker_app.BROKER_ENV] = broker
    host = socket.gethostname()
    return [
        spawn(
            celery_worker(worker_app.__name__, worker_app.QUEUES, f"bench{i}@{host}"),
            env,
            logs / f"worker{i}.log",
        )
        for i in range(count)
    ]


def measure(plan: Plan) -> dict[str, Samples]:
    """Start Redis and the workers, run the alternating rounds, stop everything."""
    samples = {variant: Samples() for variant in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp, embedded_redis(Path(tmp)) as rs:
        workers = start_workers(rs.url, plan.workers, Path(tmp), plan.broker)
        assert rs.process is not None
        driver = Driver(rs.url, [w.pid for w in workers] + [rs.process.pid], plan.broker)
        try:
            for variant in VARIANTS:  # warm up: every worker has imported and connected
                driver.submit(variant, [f"warm-{variant}-{i}" for i in range(4 * plan.workers)])
                driver.collect(4 * plan.workers, timeout=60)
            for index, variant in alternate(plan.rounds, VARIANTS):
                driver.burst(variant, f"r{index}-{variant}", plan.jobs, samples[variant])
                driver.idle(variant, f"r{index}-{variant}", plan.idle, samples[variant])
                log(f"jobs round {index} {variant}: {samples[variant].jobs_per_s[-1]:,.0f} jobs/s")
        finally:
            driver.close()
            for worker in workers:
                stop(worker)
    return samples


def throughput_report(samples: dict[str, Samples], plan: Plan) -> Report:
    """The throughput table: jobs/s per variant, median over rounds, and the ratio."""
    plain, fair, published = samples["plain"], samples["fair"], samples["fair-published"]
    rows: list[Sequence[object]] = [
        (v, median(samples[v].jobs_per_s), min(samples[v].jobs_per_s, default=0),
         max(samples[v].jobs_per_s, default=0), median(samples[v].cpu_ms))
        for v in VARIANTS
    ]  # fmt: skip
    share = ratio(median(fair.jobs_per_s), median(plain.jobs_per_s))
    columns = ("variant", "jobs/s median", "min", "max", "CPU ms/job")
    report = Report("throughput", [Section("no-op jobs", columns, rows)])
    report.notes = [
        f"{machine()}; {plan.workers} worker(s), {plan.rounds} rounds of {plan.jobs:,} jobs each",
        f"broker: {_broker_of(plan)}",
        f"fair / plain jobs/s = {share:.2f} (target >= {THROUGHPUT_RATIO}): "
        f"{met(share >= THROUGHPUT_RATIO)}; CPU per job (workers + Redis), fair / plain = "
        f"{ratio(median(fair.cpu_ms), median(plain.cpu_ms)):.2f}",
        f"with every trigger published by Kombu (fair-published / plain): jobs/s "
        f"{ratio(median(published.jobs_per_s), median(plain.jobs_per_s)):.2f}, CPU per job "
        f"{ratio(median(published.cpu_ms), median(plain.cpu_ms)):.2f}",
    ]
    report.data = {
        v: {"jobs_per_s": samples[v].jobs_per_s, "cpu_ms": samples[v].cpu_ms} for v in VARIANTS
    } | {"ratio": share}
    return report


def _broker_of(plan: Plan) -> str:
    """What carried the Celery messages, for the reports (no password)."""
    if not plan.broker:
        return "the queue's own Redis (the scripts push the fair variant's triggers)"
    scheme, _, rest = plan.broker.partition("://")
    return (
        f"{scheme}://{rest.rpartition('@')[2]} (every trigger published by Kombu; CPU per job "
        "counts the workers and Redis, not the broker's own process)"
    )


def gap_percentiles(s: Samples) -> dict[str, float]:
    """p50 and p99 of the busy gap and of the idle start, in ms."""
    return {
        "gap50": percentile(s.gaps_ms, 50),
        "gap99": percentile(s.gaps_ms, 99),
        "idle50": percentile(s.idle_ms, 50),
        "idle99": percentile(s.idle_ms, 99),
    }


def gap_report(samples: dict[str, Samples], plan: Plan) -> Report:
    """The gap table: p50/p99 of the busy gap and of the idle start, per variant."""
    columns = ("variant", "busy gap p50 ms", "busy gap p99 ms", "idle start p50 ms",
               "idle start p99 ms", "gaps", "idle jobs")  # fmt: skip
    pcts = {v: gap_percentiles(samples[v]) for v in VARIANTS}
    rows: list[Sequence[object]] = [
        (v, pcts[v]["gap50"], pcts[v]["gap99"], pcts[v]["idle50"], pcts[v]["idle99"],
         len(samples[v].gaps_ms), len(samples[v].idle_ms))
        for v in VARIANTS
    ]  # fmt: skip
    fair, plain, published = pcts["fair"], pcts["plain"], pcts["fair-published"]
    worst50 = max(fair["gap50"], fair["idle50"])
    worst99 = max(fair["gap99"], fair["idle99"])
    report = Report("gap", [Section("dispatch gap", columns, rows)])
    report.notes = [
        f"{machine()}; {plan.workers} worker(s), {plan.rounds} rounds; broker: {_broker_of(plan)}",
        f"fair path, worst of busy gap and idle start: p50 {worst50:.2f} ms (target <= "
        f"{GAP_P50_MS:g}): {met(worst50 <= GAP_P50_MS)}; p99 {worst99:.2f} ms (target <= "
        f"{GAP_P99_MS:g}): {met(worst99 <= GAP_P99_MS)}",
        f"fair / plain: busy gap p50 {ratio(fair['gap50'], plain['gap50']):.2f}x,"
        f" idle start p50 {ratio(fair['idle50'], plain['idle50']):.2f}x",
        f"fair-published / plain: busy gap p50 {ratio(published['gap50'], plain['gap50']):.2f}x,"
        f" idle start p50 {ratio(published['idle50'], plain['idle50']):.2f}x",
    ]
    report.data = {
        v: {"gaps_ms": samples[v].gaps_ms, "idle_ms": samples[v].idle_ms} for v in VARIANTS
    }
    return report
