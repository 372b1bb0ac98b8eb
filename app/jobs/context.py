"""JobContext: what a running job knows about its run, how it learns that it should stop (or,
for a preemptible type, yield its GPU), and how it reports (log lines, progress, files)."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: A progress message longer than this is cut: it is shown in a status line, not a log.
MAX_PROGRESS_MESSAGE = 200


class JobCancelledError(Exception):
    """Raised by JobContext.check_cancelled() once the job has been asked to stop. A job that
    lets it through ends REVOKED, like one that returns after a cancel (or `timeout`, where the
    ask was its budget's end)."""


class JobPreemptedError(Exception):
    """Raised by JobContext.check_preempted() once a preemptible job's run has been asked to
    yield its GPU. A job that lets it through ends the run; the job goes back in line and
    resumes from its checkpoint_dir."""


#: The error kinds a job type may end a run with (JobFailedError), beside an exception's own.
FAILURE_KINDS = frozenset({"environment", "exit_code"})


class JobFailedError(Exception):
    """Raised by a job type whose run failed in a way it names: `kind` is the job's error_kind
    (one of FAILURE_KINDS; a script job's environment that could not be built, or its script's
    exit code other than 0), and the message its error."""

    def __init__(self, message: str, kind: str) -> None:
        if kind not in FAILURE_KINDS:
            raise ValueError(f"a failure kind is one of {sorted(FAILURE_KINDS)}, not {kind!r}")
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Device:
    """One of a run's devices: the unique name of the worker whose card it is, and the card's
    number on its host (None: a CPU worker's simulated device)."""

    worker: str
    gpu_id: int | None


def _scratch_dir() -> Path:
    """An empty folder of its own for a context built by hand (a test of a job type): a worker
    always passes the run's folder, whose files become the job's artifacts."""
    return Path(tempfile.mkdtemp(prefix="fairgpu-output-"))


def _scratch_checkpoints() -> Path:
    """An empty checkpoint folder for a context built by hand: a worker passes the job's own,
    which outlives the run."""
    return Path(tempfile.mkdtemp(prefix="fairgpu-checkpoint-"))


def _never() -> bool:
    """The stop and yield flags of a context built by hand: nobody asks."""
    return False


def _ignore_log(text: str) -> None:
    """Where ctx.log goes when nobody listens (a context built by hand)."""


def _ignore_progress(fraction: float, message: str) -> None:
    """Where ctx.progress goes when nobody listens."""


def _ignore_note(facts: dict[str, Any]) -> None:
    """Where ctx.note goes when nobody listens."""


@dataclass(frozen=True)
class JobContext:
    """Handed to a job type's `setup` and `run`.

    `device` is the torch device the job should use (None where torch is not installed),
    `gpu_id` the host's number of the worker's card (None on a CPU worker), `deadline` the Unix
    time at which the job's budget runs out (it is then asked to stop, as a cancel asks, and killed
    a grace period later; docs/jobs.md, "Budgets").
    `output_dir` is an empty folder for this run: every file left in it when the job returns
    is kept as one of the job's artifacts. `checkpoint_dir` belongs to the job across its runs
    (a preemptible job's resumed run finds there what the last run left), and `preemptions`
    counts the times the job was preempted before this run; `preemptible` says whether this run
    may be asked to yield its GPU at all.
    `devices` are the run's cards in order, one per GPU the job takes (`len(ctx.devices)` is its
    count): the first is `gpu_id`'s, and within the job's process CUDA numbers them 0, 1, ...
    in that order. A context built by hand without them has one, `gpu_id`'s.
    """

    task_id: str
    gpu_id: int | None
    device: Any
    deadline: float
    _stop: Callable[[], bool] = field(default=_never, repr=False, compare=False)
    output_dir: Path = field(default_factory=_scratch_dir)
    _log: Callable[[str], None] = field(default=_ignore_log, repr=False, compare=False)
    _progress: Callable[[float, str], None] = field(
        default=_ignore_progress, repr=False, compare=False
    )
    checkpoint_dir: Path = field(default_factory=_scratch_checkpoints)
    preemptions: int = 0
    #: Whether this run may be asked to yield its GPU (its type's, or a script job's own flag).
    preemptible: bool = False
    _yield: Callable[[], bool] = field(default=_never, repr=False, compare=False)
    _note: Callable[[dict[str, Any]], None] = field(default=_ignore_note, repr=False, compare=False)
    devices: tuple[Device, ...] = ()

    def __post_init__(self) -> None:
        if not self.devices:  # a test's context: the one card it names, as a one-card run has
            object.__setattr__(self, "devices", (Device("", self.gpu_id),))

    @property
    def cancelled(self) -> bool:
        """Whether the job was asked to stop: its owner or an operator cancelled it, or its
        budget ran out. Cheap: read it often."""
        return self._stop()

    def check_cancelled(self) -> None:
        """Raise JobCancelledError if the job was asked to stop."""
        if self._stop():
            raise JobCancelledError(f"job {self.task_id} was cancelled")

    @property
    def preempted(self) -> bool:
        """Whether this run was asked to yield its GPU (only a preemptible type's run ever is):
        save a checkpoint, then raise JobPreemptedError (check_preempted()); a run that returns
        has finished the job. Cheap: read it often."""
        return self._yield()

    def check_preempted(self) -> None:
        """Raise JobPreemptedError if this run was asked to yield its GPU."""
        if self._yield():
            raise JobPreemptedError(f"job {self.task_id} was asked to yield its GPU")

    def log(self, text: str) -> None:
        """Add a line (or several, one per line of text) to the job's log."""
        self._log(str(text))

    def progress(self, fraction: float, message: str = "") -> None:
        """Say how far the job has got: fraction in [0, 1], and a short message (cut to
        MAX_PROGRESS_MESSAGE characters). ValueError for a fraction outside [0, 1]."""
        value = float(fraction)
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"progress is a fraction in [0, 1], got {fraction!r}")
        self._progress(value, str(message)[:MAX_PROGRESS_MESSAGE])

    def note(self, **facts: Any) -> None:
        """Record facts of this run that its job's result shows however the run ends (a
        script's `exit_code`, its `environment`); JSON values, the last one of a name wins."""
        self._note(dict(facts))
