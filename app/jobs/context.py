"""JobContext: what a running job knows about its run, and how it learns that it should stop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class JobCancelledError(Exception):
    """Raised by JobContext.check_cancelled() once the job has been asked to stop. A job that
    lets it through ends REVOKED, like one that returns after a cancel."""


@dataclass(frozen=True)
class JobContext:
    """Handed to a job type's `setup` and `run`.

    `device` is the torch device the job should use (None where torch is not installed),
    `gpu_id` the host's number of the worker's card (None on a CPU worker), `deadline` the Unix
    time at which the job's budget runs out (it is stopped a grace period after that).
    """

    task_id: str
    gpu_id: int | None
    device: Any
    deadline: float
    _stop: Callable[[], bool] = field(default=lambda: False, repr=False, compare=False)

    @property
    def cancelled(self) -> bool:
        """Whether the job's owner (or an operator) asked it to stop. Cheap: read it often."""
        return self._stop()

    def check_cancelled(self) -> None:
        """Raise JobCancelledError if the job was asked to stop."""
        if self._stop():
            raise JobCancelledError(f"job {self.task_id} was cancelled")
