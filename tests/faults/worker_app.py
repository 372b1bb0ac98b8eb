"""A fairgpu worker with a fault-injecting burn job: `python -m tests.faults.worker_app`.

It mirrors `app/worker.py` (same settings, same Celery options, a CPU device) but runs its jobs
in its own process (InlineExecutor, so that a job can take the worker down) with a `burn` job
type that records every run in Redis and misbehaves on request, chosen by the job's duration:

    POISON_S    the run SIGKILLs its own worker process, every time (a job that crashes its host)
    STUBBORN_S  the run sleeps its whole duration and never sees the stop flag (a kernel that
                cannot be interrupted, on a host whose heartbeat is stuck with it), so a run
                that lost its lease always reaches finish() and meets the lease token there
    anything else: the normal CPU burn (a sleep), which stops when its lease is lost

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

from app.auth import Accounts
from app.jobs import JobContext, JobType, Registry, job
from app.jobs.builtin.burn import BurnIn, BurnOut
from app.jobs.builtin.burn import burn as builtin_burn
from app.settings import Settings, get_settings
from app.wiring.celery_app import worker_argv
from app.worker import gpu
from app.worker.calls import Call, Ended, never
from app.worker.inline import InlineExecutor
from app.worker.live import NO_EVENTS, JobEvents
from app.worker.runner import build_worker, worker_name

POISON_S = 7.77
#: Long enough that a test freezes the worker while the run sleeps, however slowly it sees the
#: run start on a busy machine.
STUBBORN_S = 6.66
RUNS_KEY = "faults:runs"
TELL_APART_S = 0.05  # the budget seen by the job is its duration_s less a few milliseconds


def fault_burn(settings: Settings, device: gpu.Device) -> JobType:
    """The burn job type: record the run, then die, ignore the stop flag, or run normally."""
    runs = redis.Redis.from_url(settings.redis_url)
    name = worker_name(settings, device)

    @job(name="burn", max_duration_s=3000)
    def burn(ctx: JobContext, inp: BurnIn) -> BurnOut:
        runs.rpush(RUNS_KEY, f"{ctx.task_id} {name}")
        duration_s = ctx.deadline - time.time()  # the job's budget, to a few milliseconds
        if abs(duration_s - POISON_S) < TELL_APART_S:
            os.kill(os.getpid(), signal.SIGKILL)
        if abs(duration_s - STUBBORN_S) < TELL_APART_S:
            start = time.monotonic()
            time.sleep(duration_s)  # the job itself: uninterruptible work of this length
            return BurnOut(seconds=time.monotonic() - start)
        return builtin_burn.target(ctx, inp)  # type: ignore[no-any-return]

    return burn


class StubbornExecutor(InlineExecutor):
    """An InlineExecutor that hides the stop flag from a STUBBORN_S run. Without this, the
    heartbeat thread of a thawed worker could see the lost lease before the run returns, and
    the run would end as stopped (never reaching finish()) or not, as the two threads raced."""

    def run(
        self,
        call: Call,
        should_stop: Callable[[], bool],
        events: JobEvents = NO_EVENTS,
        should_yield: Callable[[], bool] = never,
    ) -> Ended:
        if abs(call.budget_s - STUBBORN_S) < TELL_APART_S:
            should_stop = never
        return super().run(call, should_stop, events, should_yield)


def main() -> None:
    """Run a CPU worker with the fault workload and the worker command line of app/worker.py."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = get_settings()
    device = gpu.CPU
    executor = StubbornExecutor(Registry([fault_burn(settings, device)]))
    service, _ = build_worker(settings, Accounts.load(settings.users_file), device, executor)
    service.celery.worker_main(worker_argv(settings.worker_queues, worker_name(settings, device)))


if __name__ == "__main__":
    main()
