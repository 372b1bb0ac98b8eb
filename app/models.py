"""Wire shapes of the HTTP API (pydantic): what clients send and what they get back."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from app.card_models import Device, GpuCount, Reservation
from app.fleet.needs import GpuNeed
from app.webhook_url import WebhookUrl

#: The two queues: short jobs (at most MAX_SHORT_S) and long ones.
Kind = Literal["short", "long"]
KINDS: tuple[Kind, ...] = ("short", "long")
#: Who stopped a job before its end: its owner (billed for what it ran) or an operator (unbilled).
StoppedBy = Literal["owner", "operator"]
#: Why a queued job waits (the first that holds): no live worker has a card of a class it may
#: run on, its account is at a limit of its own, its turn has come and its cards are not free
#: (it is next and every worker of its queue is busy, or it holds a reservation), or other jobs
#: go first.
WaitingFor = Literal["gpu_class", "account_limit", "gpu", "turn"]
#: How a job that did not succeed ended: its code raised, it ran past its budget, it was
#: cancelled, its process died, it was lost (its runs used every attempt without an end), it ran
#: out of GPU memory, its type's setup() failed (the job never began: not billed), the service
#: itself failed while it ended the job (internal), a script job's environment could not be built
#: (environment) or its script exited with a code other than 0 (exit_code).
ErrorKind = Literal[
    "exception",
    "timeout",
    "cancelled",
    "crashed",
    "lost",
    "oom",
    "setup",
    "internal",
    "environment",
    "exit_code",
]
#: Why a worker replaced its warm job child before the next job (app/worker/hygiene.py): the
#: child died, its device failed the check after a job, a job left GPU memory held or the heap
#: too big, it ran its CHILD_MAX_JOBS, CHILD_PER_JOB, or it was killed (a timeout, an ignored
#: cancel, an ignored ask to yield the GPU).
ChildReplacement = Literal[
    "crash", "cuda_error", "gpu_leak", "rss", "max_jobs", "per_job", "timeout", "cancel", "preempt"
]
#: The Celery queue of the fair queues' periodic reclaim (a worker may consume it too).
RECLAIM_QUEUE = "fairgpu.reclaim"


class Status(StrEnum):
    """A job's status, as the micro-queue-starter contract names them."""

    PENDING = "PENDING"  # queued
    STARTED = "STARTED"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    REVOKED = "REVOKED"  # cancelled by its owner

    @property
    def terminal(self) -> bool:
        """Whether the job has ended."""
        return self in (Status.SUCCESS, Status.FAILURE, Status.REVOKED)


def _finite_number(value: Any) -> Any:
    """A JSON number as a finite float; ValueError for anything else (a bool, a string, NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("duration_s must be a number")
    try:
        number = float(value)  # an integer past a float's range overflows here
    except OverflowError:
        raise ValueError("duration_s must be finite") from None
    if not math.isfinite(number):
        raise ValueError("duration_s must be finite")
    return number


class EnqueueRequest(BaseModel):
    """POST /enqueue-task: which queue, and how many seconds the job asks for (a job of the
    built-in type burn, on one card)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Kind
    duration_s: float = Field(
        gt=0,
        description="wall-clock seconds, the job's time limit; at most 60 short, 3000 long",
    )
    webhook: WebhookUrl = None

    @field_validator("duration_s", mode="before")
    @classmethod
    def _finite_number(cls, value: Any) -> Any:
        return _finite_number(value)

    def fingerprint(self) -> str:
        """What identifies this request for an Idempotency-Key."""
        return f"{self.kind}:{self.duration_s!r}"


class TypedEnqueueRequest(BaseModel):
    """POST /enqueue-task for a job of a registered type (GET /job-types): its input, and
    optionally its time budget and its queue."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: str = Field(min_length=1, max_length=64, description="a job type's name")
    input: dict[str, Any] = Field(
        default_factory=dict, description="the job's input, as the type's input_schema says"
    )
    duration_s: float | None = Field(
        None,
        gt=0,
        description="the job's time limit, in wall-clock seconds whatever its gpus (it uses "
        "gpus x duration_s GPU-seconds at most); by default, and at most, the type's "
        "max_duration_s (and the queue's limit)",
    )
    kind: Kind | None = Field(None, description="the queue; by default the type's")
    webhook: WebhookUrl = None
    preemptible: bool | None = Field(
        None,
        description="script jobs only: whether the scheduler may ask a run to yield its GPU "
        "(SIGTERM; it resumes later from its checkpoint folder); a typed job's type decides, "
        "and the field is a 422 there",
    )
    gpu: GpuNeed | None = Field(
        None,
        description="narrows what the job's type needs of its card (GET /job-types): the GPU "
        "classes it may run on, the memory it needs; never widens it (a 422 naming the field)",
    )
    gpus: GpuCount | None = Field(
        None,
        description="the cards the job takes, all of one class on one host: within its type's "
        "min_gpus..max_gpus (GET /job-types), by default min_gpus. A 422 naming it when it is "
        "outside that range, when no host of the fleet has that many cards of a class the job "
        "may run on (a fleet where no worker was heard yet accepts it), or when it passes the "
        "account's max_running",
    )

    @field_validator("duration_s", mode="before")
    @classmethod
    def _finite_number(cls, value: Any) -> Any:
        return None if value is None else _finite_number(value)


def _body_shape(value: Any) -> str:
    """Which of the two bodies a request is: one that names a type is a typed one, anything else
    is read (and refused, if it is not one) as the original body."""
    typed = isinstance(value, TypedEnqueueRequest) or (isinstance(value, dict) and "type" in value)
    return "TypedEnqueueRequest" if typed else "EnqueueRequest"


#: The body of POST /enqueue-task: either shape. The discriminator picks one, so that a refusal
#: lists only that shape's errors; BODY_SHAPES are the names it puts in an error's loc.
EnqueueBody = Annotated[
    Annotated[EnqueueRequest, Tag("EnqueueRequest")]
    | Annotated[TypedEnqueueRequest, Tag("TypedEnqueueRequest")],
    Discriminator(_body_shape),
]
BODY_SHAPES = frozenset({"EnqueueRequest", "TypedEnqueueRequest"})


class EnqueueResponse(BaseModel):
    """The answer to an accepted job."""

    task_id: str
    status: str = "queued"
    result: None = None


#: Where a job's log line came from: its process's stdout or stderr, or its own log calls.
LogStream = Literal["stdout", "stderr", "log"]


class Progress(BaseModel):
    """How far a running job says it has got (the latest it reported)."""

    fraction: float | None = Field(None, ge=0, le=1, description="done so far, 0 to 1")
    message: str | None = Field(None, description="what it is doing now")


class Artifact(BaseModel):
    """A file a job left: GET /tasks/{task_id}/artifacts/{name}."""

    name: str = Field(description="its path inside the job's folder, e.g. plots/loss.png")
    size: int = Field(ge=0, description="bytes")
    sha256: str = Field(description="hex digest of its content")


class LogLine(BaseModel):
    """One line of a job's output."""

    at: float = Field(description="when it was written (Unix seconds)")
    stream: LogStream
    text: str


class TaskLogs(BaseModel):
    """GET /tasks/{task_id}/logs: the job's log lines, oldest first."""

    lines: list[LogLine]


class ScriptEnvironment(BaseModel):
    """How a script job's environment was had: from the host's cache, or built (its seconds are
    billed as the job's)."""

    cached: bool
    seconds: float = Field(description="the build's seconds; 0 for a cache hit")


class JobResult(BaseModel):
    """What a finished job reports (success, or the timestamps of a failure)."""

    worker: str | None = Field(None, description="the worker of its first card")
    gpu_id: int | None = Field(None, description="its first card's index; null on CPU")
    devices: list[Device] | None = Field(
        None, description="every card of its run, in order, the first being worker/gpu_id's"
    )
    gpu_class: str | None = Field(
        None,
        description="the class of card (GPU_CLASSES) its run ended on; null without a catalog, "
        "and until the run has ended",
    )
    host: str | None = Field(
        None,
        description="the host of the worker its run ended on (WORKER_HOST, else the machine's "
        "name); null until the run has ended",
    )
    duration_s: float
    enqueued_at: float
    started_at: float | None = None
    finished_at: float | None = None
    tflops: float | None = Field(None, description="bf16 TFLOP/s reached on a GPU; null on CPU")
    output: Any | None = Field(
        None, description="on SUCCESS: the job's output (JSON, as its type's output_schema says)"
    )
    peak_gpu_memory_bytes: int | None = Field(
        None, description="the most GPU memory the run held, when measured"
    )
    peak_rss_bytes: int | None = Field(
        None, description="the most resident memory the run's process held, when measured"
    )
    artifacts: list[Artifact] | None = Field(
        None, description="on SUCCESS: the files it left (GET /tasks/{task_id}/artifacts/{name})"
    )
    exit_code: int | None = Field(
        None,
        description="a script job's exit code once its script has ended (negative: the signal "
        "that ended it); null for a typed job",
    )
    environment: ScriptEnvironment | None = Field(
        None, description="a script job's environment: whether it was cached, its build's seconds"
    )


class TaskStatus(BaseModel):
    """GET /task-status/{task_id}, and each server-sent event's data."""

    task_id: str
    status: Status
    result: JobResult | None = None
    kind: Kind
    gpus: int = Field(1, description="the cards it takes, all of one class on one host")
    attempts: int = Field(
        description="runs started so far, the one under way included, preempted ones and those "
        "lost with their worker too (a run a stopping worker hands back is not counted); "
        "MAX_ATTEMPTS limits those not preempted"
    )
    preemptions: int = Field(0, description="times a run of it yielded its GPU to a job owed one")
    runs: int = Field(
        0,
        description="its runs that its bill counts: its earlier ones (preempted, or lost with "
        "their worker and billed to their checkpoint) and the one under way or its billed last "
        "(a bill's 'over N runs')",
    )
    ran_s: float = Field(
        0.0,
        description="the seconds those runs ran, as its bill measures them: its earlier runs', "
        "and its last run's once it has ended (a run under way adds the time since "
        "result.started_at, when that run started)",
    )
    enqueued_at: float | None = Field(None, description="when it was submitted (Unix seconds)")
    position: int | None = Field(None, description="0-based place in its queue while PENDING")
    waiting_for: WaitingFor | None = Field(
        None,
        description="while PENDING, why it waits: no live worker has a card of a GPU class it "
        "may run on (gpu_class); its account is at its max_running or "
        "max_held_gpu_seconds (account_limit); its turn has come and its cards are not free: "
        "it is next and the workers are busy, or it holds a reservation (gpu); other jobs go "
        "first, by fair share or the short/long rule (turn)",
    )
    reservation: Reservation | None = Field(
        None, description="while PENDING: the cards set aside for it, once it holds some"
    )
    estimated_start_at: float | None = Field(
        None,
        description="while PENDING: when it should start (Unix seconds), from the jobs ahead of "
        "it, the workers serving its queue and their recent run times, and its account's "
        "limits with its account's jobs ahead of it; null when no worker serves the queue",
    )
    error: str | None = Field(None, description="why a FAILURE failed")
    cancel_requested: bool = Field(
        False,
        description="a stop was asked while the job ran (its owner's cancel, or an operator's); "
        "it stays true once the job has ended",
    )
    type: str = Field("burn", description="the job's type (GET /job-types)")
    error_kind: ErrorKind | None = Field(
        None,
        description="how a FAILURE or REVOKED job ended: its code raised (exception), it ran past "
        "its budget (timeout), it was cancelled, its process died (crashed), its runs were "
        "lost with their workers (lost), it ran out of GPU memory (oom), its type's setup() "
        "failed before it began (setup, not billed), the service failed while it ended the "
        "job (internal), a script job's environment could not be built (environment) or its "
        "script exited with a code other than 0 (exit_code); null otherwise",
    )
    progress: Progress | None = Field(
        None, description="the latest progress the job reported; null if none"
    )


class JobTypeView(BaseModel):
    """GET /job-types: one job type that the service runs."""

    name: str
    queue: Kind = Field(description="the queue its jobs go to unless a submit names one")
    max_duration_s: float = Field(
        description="the longest time limit (wall-clock seconds, whatever its gpus) a job of it "
        "may ask for in its queue, and the default: the type's own limit or the queue's "
        "(MAX_SHORT_S, MAX_LONG_S), the lower"
    )
    max_duration_s_by_queue: dict[Kind, float] = Field(
        default_factory=dict,
        description="the same for each queue, for a submit that names one (`kind`)",
    )
    description: str
    input_schema: dict[str, Any] = Field(description="JSON Schema of a job's input")
    output_schema: dict[str, Any] = Field(description="JSON Schema of a job's output")
    available: bool = Field(description="whether it can run here; a submit of it is a 422 if not")
    unavailable_reason: str | None = Field(None, description="why it cannot, when it cannot")
    preemptible: bool = Field(
        False,
        description="whether a run of it may be asked to yield its GPU to a job that is owed "
        "one, and resumed later from its checkpoint (docs/jobs.md)",
    )
    gpu: list[str] | None = Field(
        None, description="the GPU classes its jobs may run on, in order of preference; null: any"
    )
    min_gpu_memory_gb: float | None = Field(
        None, description="the memory of one card its jobs need, in GB; null: any card"
    )
    gpu_classes: list[str] | None = Field(
        None,
        description="the catalog's classes that can serve its jobs, in its order of preference "
        "(its own, else the cheapest first); null without a catalog (any card); empty when "
        "none can (a submit of it is a 422)",
    )
    min_gpus: int = Field(1, description="the fewest cards a job of it takes, and the default")
    max_gpus: int = Field(
        1, description="the most cards a job of it may take (a submit is held to the fleet too)"
    )


class TaskPage(BaseModel):
    """GET /tasks: one page of the caller's jobs, newest first."""

    tasks: list[TaskStatus]
    next_cursor: str | None = Field(
        None, description="pass as `cursor` for the next page; null on the last page"
    )


class Health(BaseModel):
    """GET /health."""

    redis: str
    queues: dict[str, int]
    workers_ready: int | None = Field(
        None,
        description="live workers that take jobs (heartbeat fresh, device usable); absent on a "
        "503, when Redis cannot tell",
    )
    detail: str | None = Field(None, description="what is wrong, on a 503")


class ErrorBody(BaseModel):
    """Every 4xx and 5xx answer."""

    detail: str | list[dict[str, Any]]
