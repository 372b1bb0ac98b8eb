"""What the worker and its job child say to each other: a Call (one job), and how it ended (the
child's Reply, the worker's Ended, which adds the time it measured), then the child's state
after the job (After), from which the worker decides whether the child serves the next job."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from app.jobs.context import Device
from app.worker.end_reason import Why

#: How a run ended; "preempted": a preemptible job's run yielded its GPU when asked (or was
#: stopped for not yielding in time), and the job goes back in line to resume; "environment" and
#: "exit_code": the job's type ended the run with a JobFailedError of that kind.
EndKind = Literal[
    "success",
    "exception",
    "timeout",
    "cancelled",
    "crashed",
    "oom",
    "setup",
    "internal",
    "preempted",
    "environment",
    "exit_code",
]

ERROR_LINES = 20  # lines of a traceback or of the child's output quoted in an error
ERROR_CHARS = 4096  # and at most this much of them


@dataclass(frozen=True)
class Call:
    """One job for the child: its task id, type, input (JSON text), budget and GPU, and the
    folder for its output files (the executor fills it in). A preemptible call's run may be
    asked to yield; `preemptions` counts the job's earlier preempted runs, and
    `checkpoint_dir` is the job's own folder across them (empty: a scratch folder). `devices`
    are the run's cards in order, `gpu_id` the first's (none: the worker's own card alone)."""

    task_id: str
    type: str
    input: str
    budget_s: float
    gpu_id: int | None
    output_dir: str = ""
    preemptible: bool = False
    preemptions: int = 0
    checkpoint_dir: str = ""
    devices: tuple[Device, ...] = ()


@dataclass(frozen=True)
class Ended:
    """How a job ended; `seconds` as the parent measured it, from the call to the reply or
    the kill. `output_dir` holds the files the job left (the runner stores and deletes them);
    `artifacts` is what the runner stored of them (JSON), for the job's record."""

    end: EndKind
    seconds: float
    output: str | None = None
    error: str | None = None
    peak_gpu_memory_bytes: int | None = None
    peak_rss_bytes: int | None = None
    output_dir: Path | None = None
    artifacts: str | None = None
    trace: str | None = None  # the whole traceback of a job that raised: the worker logs it
    #: Why it ended, where the job did not end by itself (end_reason.py): the executor names a
    #: timeout, a run past its budget, a dead child or a run stopped for not yielding; the run's
    #: RunAsks, whose stop a `cancelled` end was (RunAsks.named).
    why: Why | None = None
    #: What the job noted of its run (ctx.note), one JSON object; None where it noted nothing.
    facts: str | None = None


@dataclass(frozen=True)
class Reply:
    """How a job ended, as the process that ran it saw it: what the job's owner sees of its
    error, the whole traceback for the worker's log, and the seconds it measured from the
    job's start to its end (None where the job never began)."""

    end: EndKind
    output: str | None = None
    error: str | None = None
    peak_gpu_memory_bytes: int | None = None
    peak_rss_bytes: int | None = None
    trace: str | None = None
    seconds: float | None = None
    facts: str | None = None  # what the job noted of its run (ctx.note), as JSON

    def ended(self, seconds: float) -> Ended:
        """The end, timed by the job's own process where it measured (a worker paused or frozen
        while the job ran does not lengthen it, nor does the worker's late look at the pipe
        shorten it), else by the worker's measure."""
        if self.seconds is not None:
            seconds = self.seconds
        return Ended(
            self.end,
            seconds,
            self.output,
            self.error,
            self.peak_gpu_memory_bytes,
            self.peak_rss_bytes,
            trace=self.trace,
            facts=self.facts,
        )


@dataclass(frozen=True)
class After:
    """The child's state once a job has ended and its hygiene ran: why the device is unusable
    (None: it works), the bytes of GPU memory its tensors still hold and what they held after
    the last setup() (None: no device in use), and its resident memory (None: not known)."""

    problem: str | None = None
    gpu_held: int | None = None
    gpu_baseline: int | None = None
    rss_bytes: int | None = None


class ChildStartError(RuntimeError):
    """The child could not load the job types; the message says why."""


class DeviceBrokenError(ChildStartError):
    """A fresh child found its device unusable: the worker cannot run any job on it."""


def never() -> bool:
    """A should_stop or should_yield that never asks: the default of an executor's run."""
    return False


def death(exitcode: int | None) -> str:
    """How a process ended, by its exit code (None: it has not)."""
    if exitcode is None:
        return "it stopped answering"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def last_lines(text: str) -> str:
    return "\n".join(text.splitlines()[-ERROR_LINES:])[-ERROR_CHARS:]
