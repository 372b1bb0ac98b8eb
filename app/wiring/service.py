"""The wiring every fairgpu process shares: the Celery app, the short and long fair queues, the
job tasks that carry them, and the recorder. The API builds it to queue jobs; a worker builds it
and attaches a runner (app/worker/runner.py) to run them.

Each queue is a VTRRQueue whose partitions are accounts (weighted by their share) and whose items
are jobs: item id = job id, weight = the GPU-seconds the job asks for (at least 1). The job tasks
are registered in every process, since the API sends their triggers; only a worker's run them.
In a process whose WORKER_QUEUES holds both queues, a trigger of either runs the job that
app/wiring/short_first.py picks: short first, long every LONG_EVERY-th dispatch while both wait.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import redis
from celery import Celery, Task

from app import connections
from app.artifacts import CHECKPOINTS, open_artifacts
from app.auth import AccountBook
from app.code.store import AREA as CODE_AREA
from app.code.sweep import CodeSweep
from app.models import KINDS, RECLAIM_QUEUE, Kind, Status
from app.settings import Settings
from app.store import JobRecorder, RunHooks, Started, started_of
from app.store.keys import job_key
from app.store.recorder import RunEnd, internal_end
from app.vtrr import Item, Slot, VTRRQueue, VTRRTask, end_with, held_lease, serve_together
from app.vtrr.layout import PARTITION_FRONT
from app.wiring.celery_app import create_celery
from app.wiring.short_first import ShortFirst

if TYPE_CHECKING:
    from app.worker.runner import Ran

SWEEP_TASK = "fairgpu.sweep_artifacts"
#: The artifact sweep lists every stored job (a folder, or a bucket's objects): once an hour
#: at most, or once per JOB_TTL_S where that is shorter (artifact_sweep_every_s).
ARTIFACT_SWEEP_EVERY_S = 3600.0
log = logging.getLogger(__name__)

#: Weights are whole numbers (the queue's rule), so they count milliseconds: a 1.01 s job is
#: charged 1.01 s, not 2 s as whole seconds rounded up would.
WEIGHT_PER_S = 1000
#: The queues' limits group: an account's jobs in flight are counted over short and long
#: together (its max_running and max_held_gpu_seconds: app/wiring/limits.py).
LIMITS_GROUP = "accounts"


def artifact_sweep_every_s(settings: Settings) -> float:
    """How often the artifacts are swept (ARTIFACT_SWEEP_EVERY_S, or JOB_TTL_S if shorter)."""
    return min(ARTIFACT_SWEEP_EVERY_S, settings.job_ttl_s)


def job_weight(duration_s: float) -> int:
    """A job's weight in its fair queue: the GPU-milliseconds it asks for, at least 1 s worth."""
    return max(WEIGHT_PER_S, math.ceil(duration_s * WEIGHT_PER_S))


def held_limit_weight(max_held_gpu_seconds: float) -> int:
    """An account's max_held_gpu_seconds in its fair queues' units: whole GPU-milliseconds, as
    the weights are (so that a 1.001 s limit holds a 1.001 s job, float products aside)."""
    return max(1, round(max_held_gpu_seconds * WEIGHT_PER_S))


def fairness_lag_s(queue: VTRRQueue) -> float:
    """The queue's fairness lag (see FairQueue.fairness_lag) in GPU-seconds."""
    return queue.fairness_lag() / WEIGHT_PER_S


class Runner(Protocol):
    """What runs one job under the lease its task holds (app/worker/runner.py's JobRunner)."""

    def run(self, kind: Kind, job_id: str, token: str) -> str:
        """Run the job, starting and ending it itself; returns what happened, for the log."""

    def run_started(self, kind: Kind, job_id: str, token: str, started: Started) -> Ran:
        """Run a job that its lease has started; say how it ended, for the step to record."""

    def take_owed(self) -> tuple[Kind, str, str] | None:
        """The lease of the job that the last run yielded its GPU to: queue, id, token."""


@dataclass
class Service:
    """What a process of fairgpu works with: the Celery app, the queues, the recorder, and in a
    worker the runner that its job tasks call."""

    settings: Settings
    celery: Celery
    queues: dict[Kind, VTRRQueue]
    tasks: dict[Kind, VTRRTask]
    recorder: JobRecorder
    hooks: RunHooks
    runner: Runner | None = None
    artifacts_swept_at: float | None = None  # monotonic time of this process's last sweep

    def run(self, kind: Kind, task: Task, job_id: str) -> str:  # type: ignore[type-arg]
        """Run a job with this process's runner (a process without one does not run jobs). The
        lease that the task holds started the job (the queues' hooks: app/store/hooks.py), and
        the step that acks it records the end this hands it with end_with; a lease without the
        hooks' start (a retry's) has the runner start and end the job in calls of its own."""
        if self.runner is None:
            raise RuntimeError("this process queues jobs; only a worker runs them")
        lease = held_lease(task)
        if lease is None:
            raise RuntimeError(f"{task.name} ran without a lease of its fair queue")
        if lease.hooked is None:
            outcome = self.runner.run(kind, job_id, lease.token)
            self._run_owed(self.runner)
            return outcome
        started = replace(started_of(lease.hooked), leased_at=lease.leased_at)
        ran = self.runner.run_started(kind, job_id, lease.token, started)
        if ran.end is None:
            if not started.run:  # its lease's start ended it (cancelled, out of attempts)
                self.forget_checkpoint(job_id)
            end_with(task, used_weight=ran.used_weight)
            self._run_owed(self.runner)
            return ran.outcome
        try:
            args = self.recorder.end_args(ran.end)
        except Exception:  # the job must end all the same, before its lease is acked
            log.exception("the run's end could not be written out", extra={"task_id": job_id})
            args = self.recorder.end_args(internal_end(ran.end))
        recorded = partial(self._recorded, job_id, started, ran.end)
        end_with(task, *args, used_weight=ran.used_weight, then=recorded)
        return ran.outcome

    def _recorded(self, job_id: str, started: Started, end: RunEnd, done: Any) -> None:
        """The step that ended the run has run: `done` is what the hooks' done said (whether
        the end was recorded)."""
        if done:
            self.recorder.announce(job_id)  # under replicas: once they have the end
            if started.preemptible:
                self.forget_checkpoint(job_id)  # the job has ended: nobody reads it again
        elif end.status is not Status.REVOKED:
            log.warning("refused: another run owns the job", extra={"task_id": job_id})

    def _run_owed(self, runner: Runner) -> None:
        """After a run that yielded its GPU (and holds no lease now), run the job it yielded
        to on this worker, leased by name: the freed GPU is handed to it, not raced for. Its
        start and end are calls of their own; its lease is acked once its end is recorded (a
        failure before leaves the lease to lapse, and the job to run again)."""
        while (taken := runner.take_owed()) is not None:  # (it may itself be preempted)
            kind, job_id, token = taken
            log.info("running the job the preempted run yielded to", extra={"task_id": job_id})
            outcome = runner.run(kind, job_id, token)
            self.queues[kind].ack(job_id, token)
            log.info("job ended: %s", outcome, extra={"task_id": job_id, "queue": kind})

    def sweep_artifacts(self, *, now: bool = False) -> int:
        """Remove the artifacts of jobs whose records have expired (unless one was swept lately,
        and `now` is False); how many jobs' artifacts went. A store that fails is logged: the
        timer that runs the sweep (Beat's, the dev stack's) must go on."""
        settings, last = self.settings, self.artifacts_swept_at
        every = artifact_sweep_every_s(settings)
        if not now and last is not None and time.monotonic() - last < every:
            return 0
        self.artifacts_swept_at = time.monotonic()
        # A record expires JOB_TTL_S after the job ends, its artifacts were put during its run:
        # keep them as long as the longest run besides.
        longest_run = max(settings.max_short_s, settings.max_long_s) + settings.timeout_grace_s
        self.sweep_checkpoints(settings.job_ttl_s + longest_run)
        self.sweep_code()
        try:
            return open_artifacts(settings).sweep(settings.job_ttl_s + longest_run)
        except Exception:
            log.warning("the artifact sweep failed", exc_info=True)
            return 0

    def sweep_code(self) -> int:
        """Drop uploaded code unused for CODE_TTL_S that no queued, running or preempted job
        needs (app/code/sweep.py); how many accounts' holds went. It runs with the artifacts'
        sweep, on this process's sync Redis client: no event loop of its own. A failure is
        logged, as the artifacts' sweep's is."""
        try:
            blobs = open_artifacts(self.settings).within(CODE_AREA)
            return CodeSweep(blobs, self.recorder.redis).expire(self.settings.code_ttl_s)
        except Exception:
            log.warning("the code sweep failed", exc_info=True)
            return 0

    def forget_checkpoint(self, job_id: str) -> None:
        """Remove an ended job's checkpoint (app/worker/checkpoints.py), as the worker that
        recorded its end or the API that cancelled it waiting does. A store that fails is
        logged: the sweep removes the checkpoint once the job's record is gone."""
        try:
            open_artifacts(self.settings).within(CHECKPOINTS).delete(job_id)
        except Exception:
            log.warning("a checkpoint was not removed", exc_info=True, extra={"task_id": job_id})

    def sweep_checkpoints(self, older_than_s: float) -> int:
        """Remove the checkpoints (app/worker/checkpoints.py) that are as old as the artifacts
        the sweep removes, but only of jobs whose records are gone: a preempted job may wait in
        line long after its last run kept its checkpoint. How many went; a store that fails is
        logged."""

        def alive(job_id: str) -> bool:
            return bool(self.recorder.redis.exists(job_key(job_id)))

        try:
            area = open_artifacts(self.settings).within(CHECKPOINTS)
            return area.sweep(older_than_s, alive=alive)
        except Exception:
            log.warning("the checkpoint sweep failed", exc_info=True)
            return 0

    def close(self) -> None:
        """Release the broker's and Redis's connections."""
        self.celery.close()
        self.recorder.redis.close()

    def job_item(
        self,
        kind: Kind,
        job_id: str,
        duration_s: float,
        gpu_kinds: tuple[str, ...] | None = None,
        price: float = 1.0,
        gpus: int = 1,
    ) -> Item:
        """The fair-queue item of a job: its id, the job id as the task's argument, its weight
        (plain GPU-milliseconds, its cards times its seconds, which max_held_gpu_seconds
        counts), the price its fair-share charge is taken at (its cheapest class's, corrected
        when its run ends on a card: docs/operations.md), in a mixed fleet the classes it may
        run on (app/fleet/routing.py), the cards it takes at once on one host (size) and the
        most it may run once started (span: its time limit and the grace past it), by which
        reservations and backfill go."""
        spec = {"id": job_id, "args": [job_id], "weight": job_weight(duration_s) * gpus}
        return replace(
            self.tasks[kind].item(spec),
            kinds=gpu_kinds,
            price=price,
            size=gpus,
            span=duration_s + self.settings.timeout_grace_s,
        )


def build_queues(
    client: redis.Redis,
    celery_app: Celery,
    settings: Settings,
    accounts: AccountBook,
    hooks: RunHooks | None = None,
    gpu_kind: str | None = None,
    slot: Slot | None = None,
) -> dict[Kind, VTRRQueue]:
    """The short and long fair queues, each carried by the Celery queue of the same name, with
    the job store's hooks (what a worker's step runs besides the queue's own work); in a worker
    of a mixed fleet, as its class of card sees them (gpu_kind: app/fleet/routing.py)."""
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
            drain_max_s=settings.drain_max_s,
            hooks=hooks,
            replicas=settings.min_replicas,
            limits_group=LIMITS_GROUP,
            usage_half_life_s=settings.fair_share_half_life_s,
            # a lost run's job had its turn, and the loss was not its owner's doing: it goes
            # back to the front of its account's line, as a preempted one (docs/reliability.md)
            reclaim_to=PARTITION_FRONT,
            kind=gpu_kind,
            slot=slot,  # a worker's card, for jobs of several cards (app/worker/gangs.py)
            reserves=settings.reservations,
            reservation_grace_s=settings.reservation_grace_s or settings.least_grace,
        )
        for kind in KINDS
    }


def build(
    settings: Settings, accounts: AccountBook, gpu_kind: str | None = None, slot: Slot | None = None
) -> Service:
    """Wire the Celery app, the two queues (as a worker of class gpu_kind sees them, in a mixed
    fleet), the job tasks and the artifact sweep; connects to nothing."""
    celery_app = create_celery(settings)
    client = connections.sync_client(settings)
    hooks = RunHooks(settings)
    queues = build_queues(client, celery_app, settings, accounts, hooks, gpu_kind, slot)
    tasks: dict[Kind, VTRRTask] = {}
    recorder = JobRecorder(client, settings)
    service = Service(settings, celery_app, queues, tasks, recorder, hooks)

    @queues["short"].task(acks_late=True, reject_on_worker_lost=True)
    def run_short_job(self: Task, job_id: str) -> str:  # type: ignore[type-arg]
        """Run one short job."""
        return service.run("short", self, job_id)

    @queues["long"].task(acks_late=True, reject_on_worker_lost=True)
    def run_long_job(self: Task, job_id: str) -> str:  # type: ignore[type-arg]
        """Run one long job."""
        return service.run("long", self, job_id)

    tasks["short"], tasks["long"] = run_short_job, run_long_job
    if set(KINDS) <= set(settings.worker_queues):
        # A worker serving both: whichever trigger arrives, short goes first (see short_first).
        policy = ShortFirst(queues, settings.long_every)
        serve_together(list(queues.values()), policy)

    @celery_app.task(name=SWEEP_TASK, ignore_result=True, shared=False)
    def sweep_artifacts() -> int:
        """Remove the artifacts of jobs whose records have expired."""
        return service.sweep_artifacts(now=True)  # Beat's schedule is the pace

    celery_app.conf.beat_schedule = {
        **(celery_app.conf.beat_schedule or {}),
        SWEEP_TASK: {
            "task": SWEEP_TASK,
            "schedule": artifact_sweep_every_s(settings),
            "options": {"queue": RECLAIM_QUEUE},
        },
    }
    return service
