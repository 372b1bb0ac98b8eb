"""Yields: a worker's side of preemption (app/worker/preemption.py decides which run yields).

A preemptible run gets the job's checkpoint folder (app/worker/checkpoints.py), and its asks
(app/worker/stops.py RunAsks, every run's) say when it is asked to yield. Once the run has ended,
whatever its end, the folder is stored and the ask answered; a run that yielded is put back in
line: its record first (preempt.lua: PENDING, not an attempt, its seconds kept and priced so
far), then its lease, at the front of its account's partition; and the job it yielded to is
the worker's next, leased by name (take_owed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path

import redis

from app.artifacts import ArtifactStore
from app.models import Kind
from app.settings import Settings
from app.store import JobRecorder, Started
from app.store.keys import MOVES
from app.vtrr import NotReplicatedError, VTRRQueue
from app.vtrr.celery_queue import UNREACHABLE  # Redis not reached: not the job's failure
from app.worker.calls import Ended
from app.worker.checkpointed import CheckpointWatch
from app.worker.checkpoints import Checkpoints, CheckpointTooBigError
from app.worker.end_reason import Why
from app.worker.ends import RunEnds
from app.worker.lease import RunLease
from app.worker.live import JobEvents
from app.worker.preemption import answered
from app.worker.stops import RunAsks, StopListener

log = logging.getLogger(__name__)
#: How the runner records a change patiently (JobRunner._finish, around a recorder's call).
Patient = Callable[[dict[str, str], Callable[[], bool]], bool]


def budget(started: Started) -> float:
    """The seconds a run may take: the job's declared duration is a budget for all its runs,
    and a resumed run gets what is left of it, never more (0: nothing is left, and the job ends
    `timeout` without running: JobRunner)."""
    if started.ran_s == 0:  # (its earlier runs: preempted, or lost after a checkpoint)
        return started.duration_s
    return max(0.0, started.duration_s - started.ran_s)


class Yields:
    """One worker's preemptible runs: their checkpoints, their asks, and the job owed next."""

    def __init__(
        self,
        settings: Settings,
        recorder: JobRecorder,
        queues: Mapping[Kind, VTRRQueue],
        ends: RunEnds,
        stops: StopListener,
        artifacts: ArtifactStore,
    ) -> None:
        self.settings, self.recorder, self.queues = settings, recorder, queues
        self.ends, self.stops = ends, stops
        self.checkpoints = Checkpoints(artifacts, settings.max_checkpoint_bytes)
        self._ask: RunAsks | None = None  # the run in hand's
        self._owed: tuple[str, Kind] | None = None  # the job the last run yielded to

    @property
    def redis(self) -> redis.Redis:
        return self.recorder.redis

    def budget(self, started: Started) -> float:
        """The seconds this run may take (see budget())."""
        return budget(started)

    def spent(self, started: Started) -> Ended | None:
        """The end of a resumed job that has no time left (its earlier runs used its declared
        seconds): `timeout`, without running; None while it has some."""
        if started.ran_s == 0 or budget(started) > 0:
            return None
        error = (
            f"the job's earlier runs used its budget of {started.duration_s:g} s: "
            "no time was left to resume it"
        )
        return Ended("timeout", 0.0, error=error, why=Why.OVER_BUDGET)

    def checkpoint(self, job_id: str, token: str, started: Started) -> Path | None:
        """The run's own checkpoint folder (named by its lease token, where the store is a
        folder), holding what the job's last runs left; None for a job that is not preemptible
        (its context gets a scratch folder)."""
        return self.checkpoints.open(job_id, token) if started.preemptible else None

    def watch(
        self, run: tuple[Kind, str, str, Started], folder: Path | None, reports: JobEvents
    ) -> CheckpointWatch:
        """The run's checkpoint watch (checkpointed.py): its JobEvents, and at each heartbeat
        a look at its copy (none for a folder not kept in place: an S3 one)."""
        watched = folder if self.checkpoints.in_place else None
        return CheckpointWatch(reports, run, self.recorder, self.ends, watched)

    def asks(self, job_id: str, started: Started, lease_lost: Callable[[], bool]) -> RunAsks:
        """The run's asks (to stop, and for a preemptible job to yield), heard on the channels
        from now and read again at each heartbeat; lease_lost says the lease was lost."""
        heard = self.stops.watch(job_id)
        every = self.settings.heartbeat_seconds
        self._ask = RunAsks(
            self.redis, job_id, heard, lease_lost, every, preemptible=started.preemptible
        )
        return self._ask

    def keep(self, job_id: str, folder: Path | None, ended: Ended, lease: RunLease) -> Ended:
        """Store what the run left in its checkpoint folder, for the next run, then raise
        LeaseLapsedError for a run stopped for its lease (RunLease.check). A run that left more
        than MAX_CHECKPOINT_BYTES fails, as one that leaves too many artifacts does; a store
        that fails otherwise is logged, not the run's end: the next run resumes from the
        checkpoint before, as after a lost worker."""
        too_big = None
        if folder is not None:
            try:
                self.checkpoints.keep(job_id, folder, held=not lease.lapsed())
            except CheckpointTooBigError as exc:
                too_big = str(exc)
            except Exception:
                log.warning(
                    "the job's checkpoint was not kept", exc_info=True, extra={"task_id": job_id}
                )
        lease.check(ended)
        if too_big is None:
            return ended
        return replace(ended, end="exception", output=None, error=too_big, why=None)

    def forget(self, job_id: str) -> None:
        """The job has ended: its checkpoint goes (the sweep removes any a failure here left)."""
        try:
            self.checkpoints.forget(job_id)
        except Exception:
            log.warning(
                "the job's checkpoint was not removed", exc_info=True, extra={"task_id": job_id}
            )

    def settle(
        self,
        kind: Kind,
        token: str,
        started: Started,
        ended: Ended,
        who: dict[str, str],
        patiently: Patient,
    ) -> tuple[str | None, Ended]:
        """After the run: (what happened, None) once a run that yielded is back in line; else
        (None, the end to record). The ask is answered whatever the end."""
        ask, self._ask = self._ask, None
        if ask is None or not ask.asked:
            return None, ended  # (the executors end JobPreemptedError raised unasked as any)
        self._answer(ask)
        if ended.end != "preempted":
            return None, ended  # it ended first: the owed job, next in line, takes the worker
        outcome = self._requeue(kind, token, started, ended, who, patiently)
        if outcome == "preempted" and ask.owed is not None:
            self._owed = self._known(ask.owed)
        return outcome, ended

    def take_owed(self) -> tuple[Kind, str, str] | None:
        """Lease the job that the last run yielded its GPU to, if it is still queued: its queue,
        id and lease token. The freed worker is handed to it, not raced for."""
        owed, self._owed = self._owed, None
        if owed is None:
            return None
        job_id, kind = owed
        try:
            lease = self.queues[kind].take(job_id)
        except UNREACHABLE:
            return None
        return None if lease is None else (kind, job_id, lease.token)

    def _answer(self, ask: RunAsks) -> None:
        try:
            if ask.owed is not None:
                answered(self.redis, ask.job_id, ask.owed[0])
        except UNREACHABLE:
            pass  # the ask expires by itself

    def _known(self, owed: tuple[str, str]) -> tuple[str, Kind] | None:
        """The owed job and its queue, if this worker has that queue."""
        job_id, name = owed
        for kind in self.queues:
            if kind == name:
                return job_id, kind
        return None

    def _requeue(
        self,
        kind: Kind,
        token: str,
        started: Started,
        ended: Ended,
        who: dict[str, str],
        patiently: Patient,
    ) -> str:
        """The record first, retried while Redis is unreachable as an end is (another worker
        cannot start the job before it), then the lease; a run that lost its lease leaves the
        job to the run that took it."""
        job_id = who["task_id"]
        so_far = self.ends.price(kind, started, ended)
        record = partial(self.recorder.preempted, job_id, token, ended.seconds, so_far)
        if not patiently(who, record):
            return "lease lost"
        try:
            self.queues[kind].put_back(job_id, token)
            self.redis.publish(MOVES, kind)
        except UNREACHABLE:
            log.warning("Redis unreachable; the job returns when its lease lapses", extra=who)
        except NotReplicatedError:  # on the primary all the same; lost in a failover, it lapses
            log.warning("the requeue is on too few replicas", exc_info=True, extra=who)
        log.info("job preempted", extra={**who, "seconds": round(ended.seconds, 3)})
        return "preempted"
