"""JobRunner: what a worker does with one job under the lease its task holds.

Start the job under the lease (the store refuses a job that has ended or used its attempts),
renew the lease from a heartbeat while the workload runs, then record the end and charge once,
fenced by the lease token. The fair queue acks the lease when the task returns.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from functools import partial

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_before_delay,
    wait_exponential,
)

from app import billing
from app.auth import Accounts
from app.models import Kind, Status
from app.service import Service, build
from app.settings import Settings
from app.store import JobRecorder, Started
from app.vtrr import Heartbeat, VTRRQueue
from app.vtrr.celery_queue import UNREACHABLE  # Redis not reached: not the job's failure
from app.worker import gpu

log = logging.getLogger(__name__)

Workload = Callable[[gpu.Device, float, Callable[[], bool]], gpu.Outcome]

#: How long a run keeps trying to record its end while Redis is unreachable. After that it
#: gives up without acking: its lease expires and the job runs again, billed once.
FINISH_PATIENCE_S = 30.0


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
                    charge=None, owner=owner, error=error,
                )  # fmt: skip
                self._finish(who, failed)
                return "failed"
        if outcome.stopped:
            return self._stopped(kind, job_id, token, owner, outcome.seconds, who)
        charge = billing.price(self.settings, kind, duration)
        succeeded = partial(
            self.recorder.finish, job_id, token, Status.SUCCESS,
            charge=charge, owner=owner, tflops=outcome.tflops,
        )  # fmt: skip
        finished = self._finish(who, succeeded)
        return "done" if finished else "refused: another run owns the job"

    def _stopped(
        self, kind: Kind, job_id: str, token: str, owner: str, seconds: float, who: dict[str, str]
    ) -> str:
        """End a run that stopped early. Who pays: the owner's cancel is billed for the time it
        ran; an operator's stop (a dropped queue) is not, and revoke.lua has ended the job
        already; a lost lease (an admin's release, a reclaim) leaves the job to its next run,
        which alone is billed. Every end is fenced by the token."""
        by = self.recorder.stopped_by(job_id)
        if by is None:
            return "lease lost"  # another run owns the job now; leave its end to that run
        charge = billing.price(self.settings, kind, seconds, cancelled=True)
        revoked = partial(
            self.recorder.finish, job_id, token, Status.REVOKED,
            charge=charge if by == "owner" else None, owner=owner,
        )  # fmt: skip
        self._finish(who, revoked)
        return "cancelled" if by == "owner" else "stopped by an operator"

    def _finish(self, who: dict[str, str], finish: Callable[[], bool]) -> bool:
        """Record the run's end with finish (a JobRecorder.finish call), trying again while
        Redis is unreachable, for FINISH_PATIENCE_S.

        Trying again is safe: the end is fenced by the token and billed once. If Redis stays
        away, the error goes up and the fair queue keeps the lease (see VTRRQueue), so the job
        is not acked as done without a record of its end.
        """

        def warn(attempt: RetryCallState) -> None:
            log.warning("Redis unreachable; the job's end is not recorded yet", extra=who)

        patiently = Retrying(
            retry=retry_if_exception_type(UNREACHABLE),
            wait=wait_exponential(multiplier=0.1, max=2.0),  # 0.1 s, doubling, at most 2 s
            stop=stop_before_delay(FINISH_PATIENCE_S),  # no pause that would end past it
            before_sleep=warn,
            reraise=True,  # the last UNREACHABLE error, not tenacity's RetryError
        )
        return patiently(finish)


def worker_name(settings: Settings, device: gpu.Device) -> str:
    """`gpu<N>@host` or `cpu@host`, unless the settings name the worker (`%h` is the host)."""
    name = settings.worker_name or f"{device.label}@%h"
    return name.replace("%h", socket.gethostname())


def build_worker(
    settings: Settings,
    accounts: Accounts,
    device: gpu.Device = gpu.CPU,
    workload: Workload = gpu.run,
) -> tuple[Service, JobRunner]:
    """The service of a worker process: its job tasks run jobs on `device` with `workload`."""
    service = build(settings, accounts)
    name = worker_name(settings, device)
    runner = JobRunner(settings, service.recorder, service.queues, device, name, workload)
    service.runner = runner
    return service, runner
