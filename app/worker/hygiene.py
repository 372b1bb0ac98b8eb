"""When the warm child is replaced: the limits, and the decision after each job.

A child serves job after job, so a job's leftovers (a broken CUDA context, tensors kept in a
module global, a grown heap) would reach every later job of any account. After each job the
child reports its state (calls.After) and `verdict` says whether it may serve the next one;
the kills (crash, timeout, an ignored cancel) replace it without asking. Every replacement is
counted by its reason: fairgpu_child_replacements_total{reason}.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection

from app.models import ChildReplacement
from app.settings import Settings
from app.worker.calls import After

MB = 1024 * 1024
AFTER_TIMEOUT_S = 60.0  # a device check that has not answered by then has hung on the device
AFTER_POLL_S = 0.1  # how often the wait for it looks whether the child is still there


@dataclass(frozen=True)
class ChildLimits:
    """CHILD_MAX_GPU_LEAK_MB, CHILD_MAX_RSS_MB, CHILD_MAX_JOBS and CHILD_PER_JOB (None: no
    limit)."""

    max_gpu_leak_mb: float | None = 256
    max_rss_mb: float | None = None
    max_jobs: int | None = None
    per_job: bool = False

    @classmethod
    def of(cls, settings: Settings) -> ChildLimits:
        """The limits the settings give."""
        return cls(
            max_gpu_leak_mb=settings.child_max_gpu_leak_mb,
            max_rss_mb=settings.child_max_rss_mb,
            max_jobs=settings.child_max_jobs,
            per_job=settings.child_per_job,
        )

    @property
    def leak_bytes(self) -> int | None:
        """The GPU leak limit in bytes."""
        return None if self.max_gpu_leak_mb is None else int(self.max_gpu_leak_mb * MB)


@dataclass(frozen=True)
class Verdict:
    """Why the child must go, and what to say in the log line."""

    reason: ChildReplacement
    detail: str


def leaked(after: After) -> int:
    """The bytes of GPU memory held beyond what the child held after its last setup()."""
    if after.gpu_held is None:
        return 0
    return after.gpu_held - (after.gpu_baseline or 0)


def verdict(after: After, jobs_run: int, limits: ChildLimits) -> Verdict | None:
    """Whether a child that has run `jobs_run` jobs and is in this state must be replaced
    before the next job (the first reason that applies), or None."""
    if after.problem is not None:
        return Verdict("cuda_error", f"the device failed its check: {after.problem}")
    leak = leaked(after)
    if limits.leak_bytes is not None and leak > limits.leak_bytes:
        return Verdict(
            "gpu_leak",
            f"{leak / MB:.0f} MB of GPU memory still held after the job, over the "
            f"{limits.max_gpu_leak_mb:g} MB allowed (CHILD_MAX_GPU_LEAK_MB)",
        )
    rss = after.rss_bytes
    if limits.max_rss_mb is not None and rss is not None and rss > limits.max_rss_mb * MB:
        return Verdict(
            "rss",
            f"resident memory {rss / MB:.0f} MB after the job, over CHILD_MAX_RSS_MB="
            f"{limits.max_rss_mb:g}",
        )
    if limits.per_job:
        return Verdict("per_job", "CHILD_PER_JOB: every job gets a fresh child")
    if limits.max_jobs is not None and jobs_run >= limits.max_jobs:
        return Verdict("max_jobs", f"it has run {jobs_run} jobs (CHILD_MAX_JOBS)")
    return None


def await_after(conn: Connection, alive: Callable[[], bool]) -> After | Verdict:
    """The child's After message from conn (other messages, a job's lingering thread's, are
    dropped), or the verdict on a child that died (alive() false) or hung before it came."""
    deadline = time.monotonic() + AFTER_TIMEOUT_S
    while (left := deadline - time.monotonic()) > 0:
        try:
            if not conn.poll(min(left, AFTER_POLL_S)):
                if not alive():
                    break
                continue
            message = conn.recv()
        except (EOFError, OSError):
            break
        if isinstance(message, After):
            return message
    else:
        return Verdict("cuda_error", f"the device check did not end in {AFTER_TIMEOUT_S:g} s")
    return Verdict("crash", "the job child died after its job")
