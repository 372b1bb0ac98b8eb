"""JobRunner: what a worker does with one job under the lease its task holds.

Start the job under the lease (the store refuses a job that has ended or used its attempts),
renew the lease from a heartbeat while the job runs in the worker's warm child process
(app/worker/child.py) and while what it says (log lines, progress) is written to Redis
(app/worker/reports.py), store the files it left as its artifacts (app/worker/outputs.py), then
record how it ended and bill what it ran, once, fenced by the lease token; finally credit the
fair queue with what the job did not use. The fair queue acks the lease when the task returns.
"""

from __future__ import annotations

import logging
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_before_delay,
    wait_exponential,
)

from app.artifacts import ArtifactStore, open_artifacts
from app.auth import AccountBook
from app.fleet.place import WorkerPlace
from app.jobs.context import Device
from app.models import ChildReplacement, Kind, Status
from app.settings import Settings
from app.store import JobRecorder, RunEnd, Started
from app.store.keys import MOVES
from app.store.workers import Running
from app.vtrr import VTRRQueue
from app.vtrr.celery_queue import UNREACHABLE  # Redis not reached: not the job's failure
from app.wiring.service import Service, build
from app.worker import gpu, handback
from app.worker.calls import Call, ChildStartError, DeviceBrokenError, Ended, never
from app.worker.devices import Devices, apart, devices_json, job_child, recorded_on, slot_of
from app.worker.end_reason import Why
from app.worker.ends import RunEnds, internal
from app.worker.lease import LeaseLapsedError, RunLease, Watched
from app.worker.live import JobEvents
from app.worker.outputs import ArtifactsError, as_json, store_outputs
from app.worker.reports import LiveReports
from app.worker.stops import RunAsks, StopListener
from app.worker.yields import Yields

log = logging.getLogger(__name__)

#: How long a run keeps trying to record its end while Redis is unreachable. After that it
#: gives up without acking: its lease expires and the job runs again, billed once.
FINISH_PATIENCE_S = 30.0


class Executor(Watched, Protocol):
    """Runs one job to its end: the warm child process (JobChild), or in tests the worker's own
    process (app/worker/inline.py); told by when the run must have stopped (Watched)."""

    def start(self) -> None:
        """Get ready to run jobs (start the child process)."""
        ...

    def run(
        self,
        call: Call,
        should_stop: Callable[[], bool],
        events: JobEvents,
        should_yield: Callable[[], bool] = never,
    ) -> Ended:
        """Run the call; should_stop() turning True asks the job to stop, should_yield() (of a
        preemptible call) to yield its GPU; what the job says (log lines, progress) goes to
        events as it runs. The Ended names the job's output folder, which the caller deletes."""
        ...

    def broken(self) -> str | None:
        """Why its device is unusable for any further job, or None."""
        ...

    def close(self) -> None:
        """Release the process it runs jobs in."""
        ...


#: A run in hand: its lease, its asks, and its devices (its cards, in order).
_Run = tuple[RunLease, RunAsks, tuple[Device, ...]]


@dataclass(frozen=True)
class Ran:
    """How a run went: what to log, the end to record (None: nothing to record: the job had
    ended, or another run owns it now), and the fair-queue weight it used (0: it did not run)."""

    outcome: str
    end: RunEnd | None
    used_weight: int = 0


class JobRunner:
    """Runs one job under the lease its task holds."""

    def __init__(
        self,
        settings: Settings,
        recorder: JobRecorder,
        queues: dict[Kind, VTRRQueue],
        device: gpu.Device,
        worker: str,
        executor: Executor,
        stops: StopListener,
        artifacts: ArtifactStore,
        place: WorkerPlace | None = None,
    ) -> None:
        self.settings, self.recorder, self.queues = settings, recorder, queues
        self.device, self.worker, self.stops = device, worker, stops
        #: The warm executor, and the child of a run of several cards (app/worker/devices.py).
        self.executor = (
            executor if isinstance(executor, Devices) else Devices(executor, worker, device.gpu_id)
        )
        self.artifacts = artifacts
        self.ends = RunEnds(settings, place)  # prices its runs by its place's class
        #: Told when a run starts (in how many seconds it should end, and the run) and ends
        #: (None): the worker's heartbeat passes it on, for the start estimates of queued jobs
        #: and for the preemption policy.
        self.on_busy: Callable[[float | None, Running | None], None] = lambda for_s, run: None
        self.yields = Yields(settings, recorder, queues, self.ends, stops, artifacts)
        #: Told why, once a fresh child found the device unusable: the worker must stop (its
        #: main marks it broken and exits non-zero); the job in hand has been handed back.
        self.on_broken: Callable[[str], None] = lambda why: None
        #: The asks of the run in progress: a shutdown's hand-back stops it through them.
        self._current: RunAsks | None = None

    def run(self, kind: Kind, job_id: str, token: str) -> str:
        """Run the job under the lease token, with a call of its own to start it and another to
        record its end (a run whose lease came without the queues' hooks: a retry's, a
        test's); returns what happened (for the worker's log)."""
        started = self.recorder.start(job_id, token, self.worker, self.device.gpu_id)
        ran = self.run_started(kind, job_id, token, started, ask=True)
        ended = not started.run  # start.lua ended it (cancelled, out of attempts), or it had
        if ran.end is not None:
            who = {"task_id": job_id, "account": started.owner, "queue": kind}
            ended = self._finish(who, partial(self.recorder.record_end, token, ran.end))
            if not ended and ran.end.status is not Status.REVOKED:  # a stop says who stopped
                return "refused: another run owns the job"
        if ended:
            self.yields.forget(job_id)  # the job has ended: its checkpoint goes
        if ran.used_weight:
            self._credit(kind, job_id, token, ran.used_weight)
        return ran.outcome

    def run_started(
        self, kind: Kind, job_id: str, token: str, started: Started, *, ask: bool = False
    ) -> Ran:
        """Run a job that `started` says to run (start.lua's work, done by the lease: see
        app/store/hooks.py) and say how it ended, for the step that records it, bills it,
        credits the unused time and acks the lease in one call. On how many cards: `ask` (a
        lease that came without the hooks: a held one's) or Devices.placed says."""
        if not started.run:
            return Ran(started.reason, None)
        devices = self.executor.placed(self.queues[kind], job_id, ask)
        if (gpus := len(devices)) > 1:  # its status names every card while it runs
            self.recorder.name_devices(job_id, token, devices_json(devices))
            started = replace(started, gpus=gpus)  # a preemption's and a checkpoint's charge too
        if (spent := self.yields.spent(started)) is not None:  # resumed with no time left
            outcome, end = self.ends.of(kind, job_id, started, spent, gpus)
            used = self.ends.used_weight(started.ran_s, gpus)
            return Ran(outcome, recorded_on(end, devices), used)
        who = {"task_id": job_id, "account": started.owner, "queue": kind, "type": started.type}
        log.info("job started", extra={**who, "attempt": started.attempt, "worker": self.worker})
        run = Running(job_id, started.owner, kind, preemptible=started.preemptible)
        self.on_busy(self.yields.budget(started), run)
        lease = RunLease(self.queues[kind], job_id, token, self.settings, self.executor)
        asks = self._current = self.yields.asks(job_id, started, lease.lost)
        try:
            ended = self._execute(kind, job_id, token, started, (lease, asks, devices))
        except LeaseLapsedError as lapsed:  # its lease is given up: nothing of it is recorded
            return Ran(str(lapsed), None)
        except ChildStartError as exc:  # no job can run here (DeviceBrokenError: the device)
            why = _why_broken(exc)
            log.error(
                "this worker cannot run jobs: handing the job back", extra={**who, "why": why}
            )
            outcome = self._give_back(kind, job_id, token, who)
            self.on_broken(why)
            return Ran(outcome, None)
        finally:
            self._current = None
            self.stops.unwatch(job_id)
            self.on_busy(None, None)
        if (broken := self.executor.broken()) is not None:
            why = f"its device is unusable: {broken}"
            log.error("this worker cannot run jobs: no more jobs", extra={**who, "why": why})
            self.on_broken(why)  # before the step that records this end leases another
        seconds = round(ended.seconds, 3)
        trace = {"traceback": ended.trace} if ended.trace else {}
        named = {"why": ended.why.value} if ended.why else {}
        log.info("job ended", extra={**who, "end": ended.end, "seconds": seconds, **named, **trace})
        if ended.why is Why.HAND_BACK:
            return Ran(self._give_back(kind, job_id, token, who), None)
        yielded, ended = self.yields.settle(kind, token, started, ended, who, self._finish)
        if yielded is not None:
            return Ran(yielded, None)
        outcome, end = self.ends.of(kind, job_id, started, ended, gpus)
        used = self.ends.used_weight(started.ran_s + ended.seconds, gpus)
        return Ran(outcome, recorded_on(end, devices), used)

    def take_owed(self) -> tuple[Kind, str, str] | None:
        """Lease the job that the last run yielded its GPU to (Yields.take_owed)."""
        return self.yields.take_owed()

    def hand_back_after(self, grace_s: float) -> None:
        """The worker is shutting down: it takes no new job, and a job still running grace_s
        from now is stopped and handed back (handback.py), unbilled, not an attempt."""
        handback.after(grace_s, self._hand_back)

    def _hand_back(self) -> None:
        asks = self._current
        if asks is None:
            return
        log.warning("shutting down: handing the running job back", extra={"task_id": asks.job_id})
        asks.hand_back()  # the job is stopped as a cancel stops it, its end named HAND_BACK

    def _give_back(self, kind: Kind, job_id: str, token: str, who: dict[str, str]) -> str:
        return handback.give_back(self.recorder, self.queues[kind], job_id, token, who)

    def _execute(self, kind: Kind, job_id: str, token: str, started: Started, run: _Run) -> Ended:
        """Run the job on its devices under its lease, renewed by a heartbeat, stopped or asked
        to yield by its asks; its end comes back named (RunAsks.named), its reports and files
        settled."""
        lease, asks, devices = run
        every = self.settings.heartbeat_seconds
        reports = LiveReports(
            self.recorder, job_id, token, log_events_per_s=self.settings.log_events_per_s
        )
        reports.hold_from_now = partial(self.queues[kind].began, job_id, token)
        with lease.heartbeat(every):
            self.executor.gather(self.queues[kind], job_id, devices)  # (several cards: a wait)
            folder = self.yields.checkpoint(job_id, token, started)  # (a copy may take a while)
            call = Call(
                job_id,
                started.type,
                started.input,
                self.yields.budget(started),
                devices[0].gpu_id,
                preemptible=started.preemptible,
                preemptions=started.preemptions,
                checkpoint_dir="" if folder is None else str(folder),
                devices=devices,
            )
            watch = self.yields.watch((kind, job_id, token, started), folder, reports)
            lease.on_renewed = watch.look  # a checkpoint noted at each heartbeat: checkpointed.py
            try:
                lease.start(started.leased_at)  # the child's watchdog stops a run not renewed
                ended = self.executor.run(call, asks.should_stop, watch, asks.should_yield)
            except ChildStartError:
                raise
            except Exception as exc:  # the executor's own failure: the job must end all the same
                ended = internal(job_id, Ended("internal", 0.0), exc)
            ended = self.yields.keep(job_id, folder, ended, lease)  # LeaseLapsedError: see lease.py
            ended = self._settled(
                job_id, ended, reports
            )  # still under the lease: uploads take time
            return asks.named(ended)  # whose stop a `cancelled` end was (a hand-back: till now)

    def _settled(self, job_id: str, ended: Ended, reports: LiveReports) -> Ended:
        """The run's last reports written (before its end: the status event comes last) and
        its files stored; a failure of the worker's own in either ends the job `internal`."""
        try:
            reports.close()
            return self._keep_outputs(job_id, ended)
        except Exception as exc:
            if ended.output_dir is not None:
                shutil.rmtree(ended.output_dir, ignore_errors=True)
            return internal(job_id, ended, exc)

    def _keep_outputs(self, job_id: str, ended: Ended) -> Ended:
        """Store the files a successful job left as its artifacts (it fails when they cannot
        be kept: over MAX_ARTIFACT_BYTES, a name refused, the store failing); delete its
        output folder whatever the end."""
        folder = ended.output_dir
        if folder is None:
            return ended
        try:
            if ended.end != "success":
                return ended
            cap = self.settings.max_artifact_bytes
            stored = store_outputs(self.artifacts, job_id, folder, cap)
        except ArtifactsError as exc:
            return replace(ended, end="exception", output=None, error=str(exc))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        try:
            self.recorder.count_artifact_bytes(sum(artifact.size for artifact in stored))
        except UNREACHABLE:
            log.warning("Redis unreachable; artifact bytes not counted", extra={"task_id": job_id})
        return replace(ended, artifacts=as_json(stored))

    def _credit(self, kind: Kind, job_id: str, token: str, used_weight: int) -> None:
        """Give the account's partition back the fair-queue cost of the time the job did not
        use (its budget was charged at enqueue), so its queued jobs move forward; the streams of
        queued jobs hear that the queue's order changed."""
        try:
            if self.queues[kind].credit(job_id, token, used_weight) > 0:
                self.recorder.redis.publish(MOVES, kind)
        except UNREACHABLE:
            log.warning("Redis unreachable; unused time not credited", extra={"task_id": job_id})

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

    def count_replacement(self, reason: ChildReplacement) -> None:
        """Count a replacement of the job child: fairgpu_child_replacements_total{reason}."""
        try:
            self.recorder.count_child_replacement(reason)
        except UNREACHABLE:
            log.warning(
                "Redis unreachable; a child replacement not counted", extra={"reason": reason}
            )

    def start(self) -> None:
        """Listen for stops and start the child process (ChildStartError if it cannot load the
        job types, DeviceBrokenError if its device probe fails)."""
        self.stops.start()
        self.executor.start()

    def close(self) -> None:
        """Stop the child process and the stop listener."""
        self.executor.close()
        self.stops.close()


def _why_broken(exc: ChildStartError) -> str:
    """Why a worker that cannot start its job child stops, in the words its last line uses."""
    if isinstance(exc, DeviceBrokenError):
        return f"its device is unusable: {exc}"
    return f"its job child cannot start: {exc}"


def worker_name(settings: Settings, device: gpu.Device) -> str:
    """`gpu<N>@host` or `cpu@host`, unless the settings name the worker (`%h` is the host)."""
    name = settings.worker_name or f"{device.label}@%h"
    return name.replace("%h", socket.gethostname())


def build_worker(
    settings: Settings,
    accounts: AccountBook,
    device: gpu.Device = gpu.CPU,
    executor: Executor | None = None,
    gpu_kind: str | None = None,
    place: WorkerPlace | None = None,
) -> tuple[Service, JobRunner]:
    """The service of a worker process: its job tasks run jobs on `device`, in a warm child
    process unless another executor is given, taking the jobs its class may run (gpu_kind, in a
    mixed fleet: app/fleet/routing.py). Neither the child nor the stop listener is started
    here: JobRunner.start() does it (the worker's main, or a test)."""
    name = worker_name(settings, device)
    service = build(settings, accounts, gpu_kind, slot_of(place, device, name))
    child = None
    if executor is None:
        executor = child = job_child(settings, device.gpu_id)
    stops = StopListener(service.recorder.redis)
    artifacts = open_artifacts(settings)
    runner = JobRunner(
        settings, service.recorder, service.queues, device, name, executor, stops, artifacts, place
    )
    if child is not None:
        child.on_replace = runner.count_replacement
        runner.executor.one_off = apart(settings, device.gpu_id, runner.count_replacement)
    service.runner = runner
    service.hooks.for_worker(name, device.gpu_id)
    return service, runner
