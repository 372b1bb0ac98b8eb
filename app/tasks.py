"""The two fair queues (short and long) and the job task that workers run.

Each queue is a VTRRQueue whose partitions are accounts (weighted by their share) and whose items
are jobs: item id = job id, weight = the GPU-seconds the job asks for (at least 1). A worker's run:
start the job under its lease (the store refuses a job that has ended or used its attempts),
renew the lease from a heartbeat while the workload runs, then record the end and charge once,
fenced by the lease token. The lease is acked by the fair queue when the task returns.
"""

from __future__ import annotations

import logging
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import redis
from celery import Celery, Task

from app import billing, gpu
from app.auth import Accounts
from app.billing import Charge
from app.celery_app import RECLAIM_QUEUE, create_celery
from app.models import Status
from app.settings import KINDS, Kind, Settings
from app.store import JobRecorder, Started
from app.vtrr import Heartbeat, Item, VTRRQueue, VTRRTask
from app.vtrr.celery_queue import UNREACHABLE  # Redis not reached: not the job's failure

log = logging.getLogger(__name__)

Workload = Callable[[gpu.Device, float, Callable[[], bool]], gpu.Outcome]
NO_CHARGE = Charge(cost=0.0, description="", gpu_seconds=0.0)
SWEEP_TASK = "fairgpu.sweep_unqueued"


#: How long a run keeps trying to record its end while Redis is unreachable. After that it
#: gives up without acking: its lease expires and the job runs again, billed once.
FINISH_PATIENCE_S = 30.0

#: Weights are whole numbers (the queue's rule), so they count milliseconds: a 1.01 s job is
#: charged 1.01 s, not 2 s as whole seconds rounded up would.
WEIGHT_PER_S = 1000


def job_weight(duration_s: float) -> int:
    """A job's weight in its fair queue: the GPU-milliseconds it asks for, at least 1 s worth."""
    return max(WEIGHT_PER_S, math.ceil(duration_s * WEIGHT_PER_S))


def fairness_lag_s(queue: VTRRQueue) -> float:
    """The queue's fairness lag (see FairQueue.fairness_lag) in GPU-seconds."""
    return queue.fairness_lag() / WEIGHT_PER_S


def build_queues(
    client: redis.Redis, celery_app: Celery, settings: Settings, accounts: Accounts
) -> dict[Kind, VTRRQueue]:
    """The short and long fair queues, each carried by the Celery queue of the same name."""
    return {
        kind: VTRRQueue(
            client,
            celery_app,
            name=kind,
            celery_queue=kind,
            max_concurrency=settings.max_concurrency,
            lease_seconds=settings.lease_seconds,
            reclaim_interval=settings.reclaim_interval_s,
            reclaim_queue=RECLAIM_QUEUE,
            shares=accounts.share,
        )
        for kind in KINDS
    }


class JobRunner:
    """Runs one job under the lease its task holds."""

    def __init__(
        self,
        settings: Settings,
        recorder: JobRecorder,
        queues: dict[Kind, VTRRQueue],
        device: gpu.Device,
        worker: str,
        workload: Workload = gpu.run,
    ) -> None:
        self.settings, self.recorder, self.queues = settings, recorder, queues
        self.device, self.worker, self.workload = device, worker, workload
        #: Told when a run starts (when it should end, Unix seconds) and ends (None): the
        #: worker's heartbeat passes it on, for the start estimates of queued jobs.
        self.on_busy: Callable[[float | None], None] = lambda until: None

    def run(self, kind: Kind, job_id: str, token: str) -> str:
        """Run the job under the lease token; returns what happened (for the worker's log)."""
        started = self.recorder.start(job_id, token, self.worker, self.device.gpu_id)
        if not started.run:
            return started.reason
        who = {"task_id": job_id, "account": started.owner, "queue": kind}
        log.info("job started", extra={**who, "attempt": started.attempt, "worker": self.worker})
        duration = started.duration_s
        self.on_busy(time.time() + duration)
        try:
            return self._run(kind, job_id, token, started, who)
        finally:
            self.on_busy(None)

    def _run(
        self, kind: Kind, job_id: str, token: str, started: Started, who: dict[str, str]
    ) -> str:
        owner, duration = started.owner, started.duration_s
        every = self.settings.heartbeat_seconds
        with Heartbeat(self.queues[kind], job_id, token, every=every) as beat:

            def should_stop() -> bool:
                if beat.lost:
                    return True
                try:
                    return self.recorder.cancel_requested(job_id)
                except UNREACHABLE:
                    return False  # Redis away for a moment: work on; the heartbeat guards the lease

            try:
                outcome = self.workload(self.device, duration, should_stop)
            except Exception as exc:
                log.exception("job failed", extra=who)
                error = f"{type(exc).__name__}: {exc}"
                failed = partial(
                    self.recorder.finish, job_id, token, Status.FAILURE,
                    charge=NO_CHARGE, owner=owner, error=error,
                )  # fmt: skip
                self._finish(who, failed)
                return "failed"
        if outcome.stopped and self.recorder.cancel_requested(job_id):
            # Its owner cancelled it (or an admin dropped its queue, lease and all): REVOKED,
            # billed for the time it ran. Fenced: if another run holds the job now, it refuses.
            charge = billing.price(self.settings, kind, outcome.seconds, cancelled=True)
            revoked = partial(
                self.recorder.finish, job_id, token, Status.REVOKED, charge=charge, owner=owner
            )
            self._finish(who, revoked)
            return "cancelled"
        if outcome.stopped:
            return "lease lost"  # another run owns the job now; leave its end to that run
        charge = billing.price(self.settings, kind, duration)
        succeeded = partial(
            self.recorder.finish, job_id, token, Status.SUCCESS,
            charge=charge, owner=owner, tflops=outcome.tflops,
        )  # fmt: skip
        finished = self._finish(who, succeeded)
        return "done" if finished else "refused: another run owns the job"

    def _finish(self, who: dict[str, str], finish: Callable[[], bool]) -> bool:
        """Record the run's end with finish (a JobRecorder.finish call), trying again while
        Redis is unreachable, for FINISH_PATIENCE_S.

        Trying again is safe: the end is fenced by the token and billed once. If Redis stays
        away, the error goes up and the fair queue keeps the lease (see VTRRQueue), so the job
        is not acked as done without a record of its end.
        """
        deadline = time.monotonic() + FINISH_PATIENCE_S
        pause = 0.1
        while True:
            try:
                return finish()
            except UNREACHABLE:
                if time.monotonic() + pause > deadline:
                    raise
                log.warning("Redis unreachable; the job's end is not recorded yet", extra=who)
                time.sleep(pause)  # waiting out a Redis restart, not polling a test condition
                pause = min(pause * 2, 2.0)


@dataclass(frozen=True)
class Service:
    """What a process of fairgpu works with: the Celery app, the queues, the recorder."""

    celery: Celery
    queues: dict[Kind, VTRRQueue]
    tasks: dict[Kind, VTRRTask]
    recorder: JobRecorder
    runner: JobRunner

    def sweep(self) -> int:
        """Remove jobs that were created but never queued (see JobRecorder.sweep_unqueued)."""
        return self.recorder.sweep_unqueued(
            lambda kind, job_id: self.queues[kind].has(job_id),  # type: ignore[index]
            grace_s=self.runner.settings.unqueued_grace_s,
        )

    def close(self) -> None:
        """Release the broker's and Redis's connections."""
        self.celery.close()
        self.recorder.redis.close()

    def job_item(self, kind: Kind, job_id: str, duration_s: float) -> Item:
        """The fair-queue item of a job: its id, the job id as the task's argument, its weight."""
        spec = {"id": job_id, "args": [job_id], "weight": job_weight(duration_s)}
        return self.tasks[kind].item(spec)


def lease_token(task: Task) -> str:  # type: ignore[type-arg]
    """The token of the lease the fair queue gave this run (self.request.vtrr_token)."""
    token: str = vars(task.request)["vtrr_token"]
    return token


def worker_name(settings: Settings, device: gpu.Device) -> str:
    """`gpu<N>@host` or `cpu@host`, unless the settings name the worker (`%h` is the host)."""
    name = settings.worker_name or f"{device.label}@%h"
    return name.replace("%h", socket.gethostname())


def build(
    settings: Settings,
    accounts: Accounts,
    device: gpu.Device = gpu.CPU,
    workload: Workload = gpu.run,
) -> Service:
    """Wire the Celery app, the two queues and the job tasks; connects to nothing yet."""
    celery_app = create_celery(settings)
    client = redis.Redis.from_url(settings.redis_url)
    queues = build_queues(client, celery_app, settings, accounts)
    recorder = JobRecorder(client, settings)
    runner = JobRunner(settings, recorder, queues, device, worker_name(settings, device), workload)

    @queues["short"].task(acks_late=True, reject_on_worker_lost=True)
    def run_short_job(self: Task, job_id: str) -> str:  # type: ignore[type-arg]
        """Run one short job."""
        return runner.run("short", job_id, lease_token(self))

    @queues["long"].task(acks_late=True, reject_on_worker_lost=True)
    def run_long_job(self: Task, job_id: str) -> str:  # type: ignore[type-arg]
        """Run one long job."""
        return runner.run("long", job_id, lease_token(self))

    tasks: dict[Kind, VTRRTask] = {"short": run_short_job, "long": run_long_job}
    service = Service(celery_app, queues, tasks, recorder, runner)

    @celery_app.task(name=SWEEP_TASK, ignore_result=True, shared=False)
    def sweep_unqueued() -> int:
        """Remove jobs that were created but never queued."""
        return service.sweep()

    celery_app.conf.beat_schedule = {
        **(celery_app.conf.beat_schedule or {}),
        SWEEP_TASK: {
            "task": SWEEP_TASK,
            "schedule": settings.unqueued_grace_s,
            "options": {"queue": RECLAIM_QUEUE},
        },
    }
    return service
