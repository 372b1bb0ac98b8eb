"""The Celery app the throughput and gap benchmarks' workers run: `celery -A` this module.

Three no-op tasks on one app, so that the same worker processes serve every variant:

- `bench.plain`, a plain Celery task on the Celery queue "plain";
- `noop`, the one task of a VTRRQueue ("fair", carried by the Celery queue "fair"): a trigger
  wakes the worker, which leases the fairest item, runs the function and acks the lease. The
  broker is the queue's own Redis, so the queue's scripts push the triggers themselves;
- `noop_published`, the same on a second VTRRQueue with `push_triggers=False` ("fair-published",
  Celery queue "fair_published"): every trigger goes through Kombu's publish, as before the
  scripts pushed them, to show what pushing saves.

The app is fairgpu's own (`app.celery_app.create_celery`: prefetch 1, late acks, JSON), the
workers run as fairgpu's do (solo pool, concurrency 1). Each run appends one record to the list
DONE_KEY: variant, job id, worker pid, its start time, and the previous job this process ran
with the time that job's record had been written (its end), so the gap between the two is
measured inside one process.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import redis
from celery import Celery, Task

from app.settings import Settings
from app.vtrr import VTRRQueue, VTRRTask
from app.wiring.celery_app import create_celery

URL_ENV = "BENCH_REDIS_URL"
BROKER_ENV = "BENCH_BROKER_URL"  # Celery's broker when it is not that Redis (RabbitMQ)
DONE_KEY = "bench:done"
PLAIN_QUEUE, FAIR_QUEUE, PUBLISHED_QUEUE = "plain", "fair", "fair_published"
QUEUES = (PLAIN_QUEUE, FAIR_QUEUE, PUBLISHED_QUEUE)  # the one set of workers serves all three
PLAIN_TASK = "bench.plain"
MAX_CONCURRENCY = 8  # fairgpu's default MAX_CONCURRENCY: triggers waiting in the broker


@dataclass
class Recorder:
    """Writes one record per run; remembers the previous run of this process."""

    client: redis.Redis
    previous: str = "-"
    previous_end: float = 0.0

    def run(self, variant: str, job: str) -> None:
        """The whole body of a no-op job: note the start, write the record, note the end."""
        start = time.time()
        record = f"{variant} {job} {os.getpid()} {start!r} {self.previous} {self.previous_end!r}"
        self.client.rpush(DONE_KEY, record)
        self.previous, self.previous_end = job, time.time()


@dataclass(frozen=True)
class BenchApp:
    """The app, its plain task and its fair task."""

    celery: Celery
    plain: Task  # type: ignore[type-arg]
    fair: VTRRTask
    published: VTRRTask
    queue: VTRRQueue
    client: redis.Redis


def build(url: str, broker: str | None = None) -> BenchApp:
    """The benchmark's Celery app on the Redis at url (and the broker at `broker`, when it is
    not that Redis: then no script can push a trigger, and Kombu publishes them all); connects
    to nothing yet."""
    celery_app = create_celery(Settings(redis_url=url, celery_broker_url=broker or None))
    client = redis.Redis.from_url(url)
    recorder = Recorder(client)
    queue = VTRRQueue(
        client,
        celery_app,
        name="bench",
        celery_queue=FAIR_QUEUE,
        max_concurrency=MAX_CONCURRENCY,
        lease_seconds=60,
    )
    published_queue = VTRRQueue(
        client,
        celery_app,
        name="bench-published",
        celery_queue=PUBLISHED_QUEUE,
        max_concurrency=MAX_CONCURRENCY,
        lease_seconds=60,
        push_triggers=False,
    )

    @celery_app.task(name=PLAIN_TASK, shared=False, acks_late=True, reject_on_worker_lost=True)
    def plain(job: str) -> None:
        """A no-op plain Celery task."""
        recorder.run("plain", job)

    @queue.task(acks_late=True, reject_on_worker_lost=True)
    def noop(self: Any, job: str) -> None:
        """A no-op fair-queue task."""
        recorder.run("fair", job)

    @published_queue.task(acks_late=True, reject_on_worker_lost=True)
    def noop_published(self: Any, job: str) -> None:
        """The same, its triggers published by Kombu."""
        recorder.run("fair-published", job)

    return BenchApp(celery_app, plain, noop, noop_published, queue, client)


bench = build(os.environ.get(URL_ENV, "redis://127.0.0.1:1/0"), os.environ.get(BROKER_ENV))
app = bench.celery
