"""A fairgpu worker with a fault-injecting workload: `python -m tests.faults.worker_app`.

It mirrors `app/worker.py` (same settings, same Celery options, a CPU device) but hands `build()`
a workload that records every run in Redis and misbehaves on request, chosen by the job's
duration (a client can set nothing else):

    POISON_S    the run SIGKILLs its own worker process, every time (a job that crashes its host)
    STUBBORN_S  the run sleeps its whole duration and ignores the stop flag (a kernel that
                cannot be interrupted), so a run that lost its lease still reaches finish()
    anything else: the normal CPU workload (gpu.run), which stops when its lease is lost

Every run first appends "<job id> <worker>" to the list RUNS_KEY, so a test counts real runs,
independently of the job's own attempts counter. Importing the module (for its constants) builds
nothing; main() does.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable

import redis
from celery import current_task

from app.auth import Accounts
from app.settings import Settings, get_settings
from app.vtrr import held_lease
from app.worker import gpu
from app.worker.celery_app import worker_argv
from app.worker.runner import Workload, build_worker, worker_name

POISON_S = 7.77
STUBBORN_S = 2.22
RUNS_KEY = "faults:runs"


def _job_id() -> str:
    """The job this run holds (the fair queue's item id, set on the Celery request)."""
    lease = None if current_task is None else held_lease(current_task)
    return "?" if lease is None else lease.task_id


def fault_workload(settings: Settings) -> Workload:
    """The workload: record the run, then die, ignore the stop flag, or run normally."""
    runs = redis.Redis.from_url(settings.redis_url)

    def run(device: gpu.Device, duration_s: float, should_stop: Callable[[], bool]) -> gpu.Outcome:
        runs.rpush(RUNS_KEY, f"{_job_id()} {worker_name(settings, device)}")
        if duration_s == POISON_S:
            os.kill(os.getpid(), signal.SIGKILL)
        if duration_s == STUBBORN_S:
            start = time.monotonic()
            time.sleep(duration_s)  # the workload itself: uninterruptible work of this length
            return gpu.Outcome(time.monotonic() - start, None, stopped=False)
        return gpu.run(device, duration_s, should_stop)

    return run


def main() -> None:
    """Run a CPU worker with the fault workload and the worker command line of app/worker.py."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = get_settings()
    device = gpu.CPU
    service, _ = build_worker(
        settings, Accounts.load(settings.users_file), device, fault_workload(settings)
    )
    service.celery.worker_main(worker_argv(settings.worker_queues, worker_name(settings, device)))


if __name__ == "__main__":
    main()
