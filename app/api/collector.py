"""Prometheus metrics, read from Redis at each scrape.

Every number lives in Redis (the job scripts count into the `fairgpu:metrics` hash atomically
with each transition; the fair queues keep their own counters), so any API process answers
/metrics with the same values, and a restart loses nothing. Labels are the queue, the status, the
worker, and a job's type and end: none grows with the number of users or jobs (a type is one of
those registered, or "other").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import get_args

import redis
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from app.models import KINDS, ChildReplacement, ErrorKind, Kind, Status
from app.pricing import MICROS, MS
from app.store import workers as heartbeats
from app.store.keys import METRICS
from app.store.metrics import BEYOND, BUCKETS, SUM, Counter, Histogram, bucket_label, field
from app.vtrr import VTRRQueue
from app.vtrr.wire import as_text
from app.wiring.service import fairness_lag_s

#: How a job ended, as fairgpu_jobs_ended_total's `end` label says it.
ENDS = ("success", *get_args(ErrorKind))
#: The `type` label of jobs whose type is not registered in this process.
OTHER_TYPE = "other"
HISTOGRAMS = {
    Histogram.WAIT: ("fairgpu_job_wait_seconds", "Seconds from submission to a job's first start"),
    Histogram.RUN: ("fairgpu_job_run_seconds", "Seconds a run of a job took, by how it ended"),
}


def read_counters(client: redis.Redis) -> dict[str, float]:
    """The service's counters hash (a fixed set of fields: a few per queue and status)."""
    return {as_text(k): float(v) for k, v in client.hgetall(METRICS).items()}


def histogram_buckets(
    counters: Mapping[str, float], name: str, kind: Kind
) -> list[tuple[str, float]]:
    """Cumulative buckets of one histogram, from the per-bucket counts the scripts keep."""
    buckets, total = [], 0.0
    for label in [*map(bucket_label, BUCKETS), BEYOND]:
        total += counters.get(field(name, kind, label), 0.0)
        buckets.append((label, total))
    return buckets


class ServiceCollector(Collector):
    """Collects the service's metrics from Redis when Prometheus scrapes."""

    def __init__(
        self,
        client: redis.Redis,
        queues: Mapping[Kind, VTRRQueue],
        heartbeat_s: float,
        open_streams: Callable[[], int],
        job_types: Iterable[str] = (),
    ) -> None:
        self.client, self.queues, self.heartbeat_s = client, queues, heartbeat_s
        self.open_streams = open_streams
        self.job_types = frozenset(job_types)

    def collect(self) -> Iterator[Metric]:
        """Every metric, freshly read."""
        counters = read_counters(self.client)
        yield from self._queue_gauges()
        yield from self._job_counters(counters)
        yield self._ended(counters)
        yield from _output_counters(counters)
        for key, (name, doc) in HISTOGRAMS.items():
            family = HistogramMetricFamily(name, doc, labels=["queue"])
            for kind in KINDS:
                family.add_metric(
                    [kind],
                    histogram_buckets(counters, key, kind),
                    counters.get(field(key + SUM, kind), 0.0),
                )
            yield family
        yield _replacements(counters)
        yield from self._workers()
        streams = GaugeMetricFamily(
            "fairgpu_api_open_streams", "Server-sent event streams open on this API process"
        )
        streams.add_metric([], self.open_streams())
        yield streams

    def _queue_gauges(self) -> Iterator[Metric]:
        queued = GaugeMetricFamily("fairgpu_jobs_queued", "Jobs waiting", labels=["queue"])
        in_flight = GaugeMetricFamily(
            "fairgpu_jobs_in_flight", "Jobs leased by a worker", labels=["queue"]
        )
        lag = GaugeMetricFamily(
            "fairgpu_fairness_lag_seconds",
            "GPU-seconds the least-served account with queued jobs is behind the most-served",
            labels=["queue"],
        )
        reclaims = CounterMetricFamily(
            "fairgpu_queue_reclaims", "Leases that expired and went back", labels=["queue"]
        )
        held = GaugeMetricFamily(
            "fairgpu_jobs_held_by_limit",
            "Jobs waiting because their account is at its max_running or max_held_gpu_seconds",
            labels=["queue"],
        )
        for kind, queue in self.queues.items():
            held.add_metric([kind], queue.held_back())
            queued.add_metric([kind], queue.length())
            in_flight.add_metric([kind], queue.pending())
            lag.add_metric([kind], fairness_lag_s(queue))
            reclaims.add_metric([kind], queue.stats()["reclaimed"])
        yield from (queued, in_flight, lag, reclaims, held)

    def _job_counters(self, counters: Mapping[str, float]) -> Iterator[Metric]:
        finished = CounterMetricFamily(
            "fairgpu_jobs_finished", "Jobs that ended", labels=["queue", "status"]
        )
        attempts = CounterMetricFamily(
            "fairgpu_job_attempts", "Runs started (a retried job counts each)", labels=["queue"]
        )
        cost = CounterMetricFamily("fairgpu_billed_cost", "Total billed", labels=["queue"])
        gpu_s = CounterMetricFamily(
            "fairgpu_billed_gpu_seconds", "GPU-seconds billed", labels=["queue"]
        )
        preemptions = CounterMetricFamily(
            "fairgpu_job_preemptions",
            "Runs that yielded their GPU to a job owed one (docs/fairness.md)",
            labels=["queue"],
        )
        for kind in KINDS:
            preemptions.add_metric([kind], counters.get(field(Counter.PREEMPTIONS, kind), 0))
            for status in (s for s in Status if s.terminal):
                ended = counters.get(field(Counter.FINISHED, kind, status), 0)
                finished.add_metric([kind, status], ended)
            attempts.add_metric([kind], counters.get(field(Counter.ATTEMPTS, kind), 0))
            # exact integer totals; the float ones are what releases before exact billing
            # counted, added so that the counters never go down across an upgrade
            billed = counters.get(field(Counter.BILLED_MICROS, kind), 0) / MICROS
            cost.add_metric([kind], billed + counters.get(f"billed_cost:{kind}", 0))
            billed_s = counters.get(field(Counter.BILLED_MS, kind), 0) / MS
            gpu_s.add_metric([kind], billed_s + counters.get(f"billed_gpu_seconds:{kind}", 0))
        yield from (finished, attempts, cost, gpu_s, preemptions)

    def _ended(self, counters: Mapping[str, float]) -> Metric:
        """Jobs ended by type and end, from the scripts' `ended:<type>:<end>` fields; the types
        that are not registered here are added up as "other", so labels stay few."""
        family = CounterMetricFamily(
            "fairgpu_jobs_ended",
            "Jobs that ended, by type and how: success, or their error kind",
            labels=["type", "end"],
        )
        names = sorted(self.job_types - {OTHER_TYPE})
        totals = {(name, end): 0.0 for name in [*names, OTHER_TYPE] for end in ENDS}
        for name, count in counters.items():
            what, _, rest = name.partition(":")
            job_type, _, end = rest.partition(":")
            if what == Counter.ENDED and end in ENDS:
                label = job_type if job_type in self.job_types else OTHER_TYPE
                totals[label, end] += count
        for labels, count in totals.items():
            family.add_metric(list(labels), count)
        return family

    def _workers(self) -> Iterator[Metric]:
        seconds, micros = self.client.time()  # the heartbeats are stamped with Redis's clock
        now = seconds + micros / 1e6
        seen = heartbeats.read(self.client, now)
        beats = GaugeMetricFamily(
            "fairgpu_worker_last_heartbeat_timestamp_seconds",
            "When each worker last said it was alive (Unix seconds)",
            labels=["worker"],
        )
        broken = GaugeMetricFamily(
            "fairgpu_worker_broken",
            "1 for a worker that stopped because its device is unusable, 0 for the others",
            labels=["worker"],
        )
        for worker in seen:
            beats.add_metric([worker.name], worker.seen)
            broken.add_metric([worker.name], 0 if worker.broken is None else 1)
        alive = GaugeMetricFamily(
            "fairgpu_workers", "Live workers serving a queue", labels=["queue"]
        )
        for kind in KINDS:
            alive.add_metric([kind], len(heartbeats.alive(seen, kind, now, self.heartbeat_s)))
        yield from (beats, alive, broken)


def _replacements(counters: Mapping[str, float]) -> Metric:
    """Job children replaced before the next job, from the workers' `child_replacements:<reason>`
    fields."""
    family = CounterMetricFamily(
        "fairgpu_child_replacements",
        "Job child processes replaced before the next job, by reason (docs/operations.md)",
        labels=["reason"],
    )
    for reason in get_args(ChildReplacement):
        family.add_metric([reason], counters.get(f"child_replacements:{reason}", 0.0))
    return family


def _output_counters(counters: Mapping[str, float]) -> Iterator[Metric]:
    """What the workers count of jobs' outputs: log lines the stream's throttle left out (the
    logs endpoint still has them), and bytes of artifacts stored."""
    dropped = CounterMetricFamily(
        "fairgpu_log_lines_dropped",
        "Log lines left out of event streams by the throttle (GET /tasks/{id}/logs keeps them)",
    )
    dropped.add_metric([], counters.get(Counter.LOG_LINES_DROPPED, 0.0))
    stored = CounterMetricFamily("fairgpu_artifact_bytes", "Bytes of artifacts stored")
    stored.add_metric([], counters.get("artifact_bytes", 0.0))
    yield from (dropped, stored)
    yield from _webhook_counters(counters)


#: The webhook sender's counters (app/webhooks): name, what it counts, field in the hash.
WEBHOOK_COUNTERS = (
    (
        "fairgpu_webhooks_delivered",
        "Webhooks a receiver accepted (2xx)",
        Counter.WEBHOOKS_DELIVERED,
    ),
    (
        "fairgpu_webhooks_failed",
        "Webhook deliveries that failed (retried)",
        Counter.WEBHOOKS_FAILED,
    ),
    (
        "fairgpu_webhooks_given_up",
        "Webhooks given up after their last attempt",
        Counter.WEBHOOKS_GIVEN_UP,
    ),
)


def _webhook_counters(counters: Mapping[str, float]) -> Iterator[Metric]:
    for name, documentation, counter in WEBHOOK_COUNTERS:
        family = CounterMetricFamily(name, documentation)
        family.add_metric([], counters.get(counter, 0.0))
        yield family


def registry(collector: ServiceCollector) -> CollectorRegistry:
    """A registry holding only the service's metrics (no per-process defaults: every API
    process would report its own, and they would disagree)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg
