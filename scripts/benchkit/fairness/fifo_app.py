"""The FIFO baseline: plain Celery on `short` and `long` queues, without the fair queue.

Each job is a Celery message carrying its id and duration; a worker (solo pool, prefetch 1,
late acks, like fairgpu's) runs them in the broker's order. The task sleeps for the job's
duration, as a fairgpu CPU worker does, and records its start, end and worker in the job's
Redis hash, where the submitter wrote its enqueue time. Workers run this module:

    python -m celery -A scripts.benchkit.fairness.fifo_app worker --pool solo ...

with FAIRNESS_FIFO_REDIS set to the Redis URL (a database of its own).
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery, Task
from celery.signals import worker_ready

TASK_NAME = "fairness.fifo.run"
QUEUES = ("short", "long")  # the Celery queues its workers consume, as fairgpu's do
READY_KEY = "fifo:ready"  # set of worker names that are up
STARTED_KEY = "fifo:started"  # jobs started so far (a counter)
URL_ENV = "FAIRNESS_FIFO_REDIS"


def job_key(job_id: str) -> str:
    """The hash of one job: enqueued, started, finished, worker, account, duration."""
    return f"fifo:job:{job_id}"


def make_app(url: str) -> Celery:
    """A Celery app with fairgpu's delivery settings (see app/celery_app.py), on url."""
    celery = Celery("fairness-fifo", broker=url, set_as_current=False)
    celery.conf.update(
        worker_concurrency=1,
        worker_prefetch_multiplier=1,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return celery


app = make_app(os.environ.get(URL_ENV, "redis://127.0.0.1:1/0"))
_state: dict[str, Any] = {}


def _redis() -> redis.Redis:
    """This worker's one Redis client (created on first use)."""
    if "client" not in _state:
        _state["client"] = redis.Redis.from_url(os.environ[URL_ENV])
    client: redis.Redis = _state["client"]
    return client


@worker_ready.connect
def _announce(sender: Any = None, **_: Any) -> None:
    """Tell the runner this worker consumes."""
    _redis().sadd(READY_KEY, str(getattr(sender, "hostname", "?")))


@app.task(name=TASK_NAME, bind=True)
def run_job(self: Task, job_id: str, duration_s: float) -> None:  # type: ignore[type-arg]
    """Record the start, sleep for the job's duration (the CPU workload), record the end."""
    client = _redis()
    worker = str(self.request.hostname)
    client.hset(job_key(job_id), mapping={"started": time.time(), "worker": worker})
    client.incr(STARTED_KEY)
    time.sleep(duration_s)  # the job's work is to wait, as on a fairgpu CPU worker
    client.hset(job_key(job_id), "finished", time.time())
