"""The Celery app and VTRRQueue that the worker processes of test_celery_worker.py import.

A worker is started as `celery -A tests.vtrr.celery_worker_app worker ...` with VTRR_TEST_CONFIG
set to the JSON of `Config`; importing this module then builds `app` from it. The test process
calls `build()` with the same Config, so both sides register the same task name on the same
queue. Each test gives its task a name of its own.

The task takes (mode, key) and records every run in the vtrr database (RUNS_KEY, one JSON line
each). Modes:
  "ok"     return
  "fail"   raise ValueError
  "flaky"  raise ValueError on the first run only (for autoretry_for)
  "retry"  self.retry(countdown=0) on the first run, then return
  "retry_late"  on the first delivery retry after RETRY_LATE_S, then return
  "block"  on the item's first delivery (vtrr_timeouts == 0), wait until the test pushes to
           release_key(key) (or BLOCK_TIMEOUT_S passes), then return
  "exit"   on the first delivery raise SystemExit, as a hard time limit does, then return
Signals count what the tests wait on: PUBLISHED_KEY the task's messages published by Kombu
(triggers and retries, by either process; not the triggers the scripts push), FINISHED_KEY the
messages whose run ended in a worker, whatever the outcome (SystemExit included; only a killed
process ends none).
"""

from __future__ import annotations

import builtins
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from celery import Celery, Task
from celery.signals import after_task_publish, task_postrun
from redis import Redis

from app.vtrr import VTRRQueue, VTRRTask
from app.vtrr.layout import TRIGGER_ID

CONFIG_ENV = "VTRR_TEST_CONFIG"
RUNS_KEY = "test:runs"
PUBLISHED_KEY = "test:published"
FINISHED_KEY = "test:finished"
BLOCK_TIMEOUT_S = 60
RETRY_LATE_S = 2.0


def release_key(key: str) -> str:
    """The list a "block" run of item key waits on."""
    return f"test:release:{key}"


@dataclass(frozen=True)
class Config:
    """What both processes build from; a worker reads it from VTRR_TEST_CONFIG."""

    broker_url: str
    vtrr_url: str
    name: str
    celery_queue: str
    task_name: str
    lease_seconds: float = 60
    max_concurrency: int = 4
    #: @vtrr.task options; autoretry_for as builtin exception names.
    task_options: dict[str, Any] = field(default_factory=dict)

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> Config:
        return cls(**json.loads(os.environ[CONFIG_ENV]))


@dataclass
class Harness:
    """One side's app, queue and task, and the signal handlers it connected."""

    config: Config
    app: Celery
    vtrr: VTRRQueue
    task: VTRRTask
    redis: Redis
    _handlers: list[tuple[Any, Callable[..., None]]] = field(default_factory=list)

    def close(self) -> None:
        for signal, handler in self._handlers:
            signal.disconnect(handler)
        self.app.close()
        self.redis.close()


def make_job(record: Redis, name: str) -> Callable[..., Any]:
    """The task's function, named name (its Celery name is this module's name + name)."""

    def job(self: Task, mode: str, key: str) -> str:
        request = self.request
        timeouts = request.vtrr_timeouts
        run = {
            "key": key,
            "mode": mode,
            "timeouts": timeouts,
            "vtrr_task_id": request.vtrr_task_id,
            "token": request.vtrr_token,
            "retries": request.retries,
            "celery_id": request.id,
            "pid": os.getpid(),
        }
        record.rpush(RUNS_KEY, json.dumps(run))
        if mode == "fail" or (mode == "flaky" and request.retries == 0):
            raise ValueError(f"item {key} fails")
        if mode == "retry" and request.retries == 0:
            raise self.retry(countdown=0)
        if mode == "retry_late" and timeouts == 0 and request.retries == 0:
            raise self.retry(countdown=RETRY_LATE_S)
        if mode == "block" and timeouts == 0:
            record.blpop([release_key(key)], timeout=BLOCK_TIMEOUT_S)
        if mode == "exit" and timeouts == 0:
            raise SystemExit(1)
        return key

    job.__name__ = job.__qualname__ = name
    return job


def build(config: Config) -> Harness:
    """The Celery app, VTRRQueue and decorated task for config, with the counting signals."""
    app = Celery(f"vtrr-test-{config.task_name}", broker=config.broker_url, set_as_current=False)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        worker_prefetch_multiplier=1,
        worker_enable_remote_control=False,
        task_ignore_result=True,
    )
    record = Redis.from_url(config.vtrr_url)
    vtrr = VTRRQueue(
        record,
        app,
        name=config.name,
        celery_queue=config.celery_queue,
        max_concurrency=config.max_concurrency,
        lease_seconds=config.lease_seconds,
    )
    options = dict(config.task_options)
    if "autoretry_for" in options:
        options["autoretry_for"] = tuple(getattr(builtins, n) for n in options["autoretry_for"])
    task = vtrr.task(make_job(record, config.task_name), **options)
    harness = Harness(config, app, vtrr, task, record)

    def published(sender: Any = None, headers: Any = None, **_: Any) -> None:
        # The message VTRRQueue builds once through Kombu's memory transport, to store for its
        # scripts, carries TRIGGER_ID and reaches no broker: not a publish.
        if sender == task.name and (headers or {}).get("id") != TRIGGER_ID:
            record.incr(PUBLISHED_KEY)

    def finished(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "name", None) == task.name:
            record.incr(FINISHED_KEY)

    for signal, handler in ((after_task_publish, published), (task_postrun, finished)):
        signal.connect(handler, weak=False)
        harness._handlers.append((signal, handler))
    return harness


if CONFIG_ENV in os.environ:  # a worker process: `celery -A` finds `app`
    app = build(Config.from_env()).app
