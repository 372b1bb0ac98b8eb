"""JobRecord: one job as the store keeps it, parsed once from its Redis hash (or an event's copy).

The scripts in lua/ write every field as text; here they become typed, so the rest of the code
reads `job.status` and `job.kind`, never a string out of a dict.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import TypeAdapter, ValidationError

from app.card_models import Device, Reservation
from app.models import (
    KINDS,
    Artifact,
    ErrorKind,
    JobResult,
    Kind,
    Progress,
    ScriptEnvironment,
    Status,
    TaskStatus,
    WaitingFor,
)
from app.vtrr.wire import as_text


def decode(fields: Mapping[Any, Any]) -> dict[str, str]:
    """A Redis hash (or stream entry) as str -> str."""
    return {as_text(k): as_text(v) for k, v in fields.items()}


def _number(fields: Mapping[str, str], name: str) -> float | None:
    value = fields.get(name)
    return float(value) if value else None


def _whole(fields: Mapping[str, str], name: str) -> int | None:
    value = fields.get(name)
    return int(value) if value else None


def _error_kind(value: str | None) -> ErrorKind | None:
    for kind in get_args(ErrorKind):
        if value == kind:
            found: ErrorKind = kind
            return found
    return None


def _output(text: str | None) -> Any:
    """The job's output, from the JSON text finish.lua keeps; None if there is none (or if it is
    not JSON, which a status should survive rather than answer 500 for ever)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


_ARTIFACTS = TypeAdapter(list[Artifact])


def _progress(text: str | None) -> Progress | None:
    """The latest progress, from the JSON the worker keeps; None if none or malformed (a
    status should survive a bad report rather than answer 500)."""
    if not text:
        return None
    try:
        return Progress.model_validate_json(text)
    except ValidationError:
        return None


def _artifacts(text: str | None) -> list[Artifact] | None:
    """The artifacts a SUCCESS lists; None if none or malformed."""
    if not text:
        return None
    try:
        return _ARTIFACTS.validate_json(text)
    except ValidationError:
        return None


_DEVICES = TypeAdapter(list[Device])


def _devices(record: JobRecord) -> list[Device] | None:
    """The cards of the job's run, in order: those its end named (a run of several), else, for
    a job of one card, its worker's; None before a worker took it, or where they are garbled."""
    if record.devices:
        try:
            return _DEVICES.validate_json(record.devices)
        except ValidationError:
            return None
    if record.worker is None or record.gpus != 1:  # a run of several names them at its end
        return None
    return [Device(worker=record.worker, gpu_id=record.gpu_id)]


def _facts(text: str | None) -> tuple[int | None, ScriptEnvironment | None]:
    """A script's exit code and environment, from the facts its last run noted (JSON); what is
    missing or malformed is None (a status should survive a bad note rather than answer 500)."""
    try:
        facts = json.loads(text) if text else None
    except ValueError:
        facts = None
    if not isinstance(facts, dict):
        return None, None
    code = facts.get("exit_code")
    exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    try:
        environment = ScriptEnvironment.model_validate(facts.get("environment"))
    except ValidationError:
        environment = None
    return exit_code, environment


def _kind(value: str) -> Kind:
    for kind in KINDS:
        if value == kind:
            return kind
    raise ValueError(f"not a queue: {value!r}")


@dataclass(frozen=True)
class JobRecord:
    """A job: who owns it, which queue and type, its status, its runs' times and outcome."""

    task_id: str
    owner: str
    kind: Kind
    status: Status
    duration_s: float
    enqueued_at: float
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    worker: str | None = None
    gpu_id: int | None = None
    tflops: float | None = None
    error: str | None = None
    token: str | None = None  # the lease of the run that holds it now
    cancel_requested: bool = False
    type: str = "burn"  # a job created before types existed was a burn job
    error_kind: ErrorKind | None = None
    output: str | None = None  # JSON text, kept as it came: parsed only for a status
    peak_gpu_memory_bytes: int | None = None
    peak_rss_bytes: int | None = None
    progress: str | None = None  # JSON text, the latest the job reported
    artifacts: str | None = None  # JSON text, the list a SUCCESS left
    preemptions: int = 0
    ran_s: float = 0.0  # the seconds of its earlier runs, those its bill counts
    ran_runs: int | None = None  # how many earlier runs those are (absent: its preemptions)
    run_s: float | None = None  # the seconds of its last run, once ended and billed
    facts: str | None = None  # JSON text, what its last run noted (ctx.note)
    #: The GPU classes it may run on, in order of preference; () any card (app/fleet/needs.py).
    gpu_classes: tuple[str, ...] = ()
    host: str | None = None  # where its run ended: its worker's host and class of card
    gpu_class: str | None = None
    gpus: int = 1  # the cards it takes, all of one class on one host (issue 42)
    devices: str | None = None  # JSON text, the cards its last run of several took, in order

    @classmethod
    def parse(cls, raw: Mapping[Any, Any]) -> JobRecord:
        """The record in a job's hash, as submit.lua and the other scripts write it."""
        fields = decode(raw)
        gpu = fields.get("gpu_id")
        return cls(
            task_id=fields["task_id"],
            owner=fields["owner"],
            kind=_kind(fields["kind"]),
            status=Status(fields["status"]),
            duration_s=float(fields["duration_s"]),
            enqueued_at=float(fields["enqueued_at"]),
            attempts=int(fields.get("attempts", "0")),
            started_at=_number(fields, "started_at"),
            finished_at=_number(fields, "finished_at"),
            worker=fields.get("worker"),
            gpu_id=int(gpu) if gpu else None,
            tflops=_number(fields, "tflops"),
            error=fields.get("error"),
            token=fields.get("token"),
            cancel_requested="cancel" in fields,
            type=fields.get("type", "burn"),
            error_kind=_error_kind(fields.get("error_kind")),
            output=fields.get("output"),
            peak_gpu_memory_bytes=_whole(fields, "peak_gpu_memory_bytes"),
            peak_rss_bytes=_whole(fields, "peak_rss_bytes"),
            progress=fields.get("progress"),
            artifacts=fields.get("artifacts"),
            preemptions=int(fields.get("preemptions", "0")),
            ran_s=_number(fields, "ran_s") or 0.0,
            ran_runs=_whole(fields, "ran_runs"),
            run_s=_number(fields, "run_s"),
            facts=fields.get("facts"),
            gpu_classes=tuple(filter(None, fields.get("gpu_classes", "").split(","))),
            host=fields.get("host"),
            gpu_class=fields.get("gpu_class"),
            gpus=_whole(fields, "gpus") or 1,
            devices=fields.get("devices"),
        )

    @property
    def runs(self) -> int:
        """Its runs that its bill counts: the earlier ones whose seconds are in ran_s, and the
        one under way or its last, once billed (a preempted run's successor waits: not yet)."""
        earlier = self.preemptions if self.ran_runs is None else self.ran_runs
        last = self.status is Status.STARTED or self.run_s is not None
        return earlier + (1 if last else 0)

    @property
    def seconds_run(self) -> float:
        """The seconds of those runs, as its bill measures them: the earlier runs', and the
        last one's once it has ended (a run under way is the client's to add)."""
        return self.ran_s + (self.run_s or 0.0)

    def status_view(
        self,
        position: int | None = None,
        estimated_start_at: float | None = None,
        waiting_for: WaitingFor | None = None,
        reservation: Reservation | None = None,
    ) -> TaskStatus:
        """The status a client sees; the place in line and why it waits only while queued."""
        pending = self.status is Status.PENDING
        result = None
        if self.status is Status.SUCCESS or self.started_at is not None:
            exit_code, environment = _facts(self.facts)
            result = JobResult(
                worker=self.worker,
                gpu_id=self.gpu_id,
                devices=_devices(self),
                gpu_class=self.gpu_class,
                host=self.host,
                duration_s=self.duration_s,
                enqueued_at=self.enqueued_at,
                started_at=self.started_at,
                finished_at=self.finished_at,
                tflops=self.tflops,
                output=_output(self.output) if self.status is Status.SUCCESS else None,
                peak_gpu_memory_bytes=self.peak_gpu_memory_bytes,
                peak_rss_bytes=self.peak_rss_bytes,
                artifacts=_artifacts(self.artifacts) if self.status is Status.SUCCESS else None,
                exit_code=exit_code,
                environment=environment,
            )
        return TaskStatus(
            task_id=self.task_id,
            status=self.status,
            enqueued_at=self.enqueued_at,
            result=result,
            kind=self.kind,
            gpus=self.gpus,
            # every run started: the store counts those not preempted (MAX_ATTEMPTS's count)
            attempts=self.attempts + self.preemptions,
            preemptions=self.preemptions,
            runs=self.runs,
            ran_s=round(self.seconds_run, 3),
            position=position if pending else None,
            estimated_start_at=estimated_start_at if pending else None,
            waiting_for=waiting_for if pending else None,
            reservation=reservation if pending else None,
            error=self.error,
            cancel_requested=self.cancel_requested,
            type=self.type,
            error_kind=self.error_kind,
            progress=_progress(self.progress),
        )


@dataclass(frozen=True)
class JobEvent:
    """A report in a job's event stream that is not a change of the job: `name` is progress or
    log, `data` its JSON text (see app/store/keys.py)."""

    name: str
    data: str

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> JobEvent | None:
        """The report in a stream entry, or None when the entry is a copy of the job."""
        name = fields.get("event")
        return None if name is None else cls(name, fields.get("data", "null"))
