"""When a queued job should start: from its place in line, when each worker serving its queue
is free again, and the queue's recent mean run time.

A worker busy with a job (of either queue) is free again when that job's asked-for duration has
passed; an idle one is free now. The jobs ahead each take one mean run and go, in order, to the
worker that is free first. With every run equal, that is round robin over the workers sorted by
when they are free: the job at position p starts at free[p mod W] + (p div W) mean runs.
"""

from __future__ import annotations


def wait_s(position: int, free_in_s: list[float], mean_run_s: float) -> float | None:
    """Seconds until the job at `position` should start, given in how many seconds each worker
    serving its queue is free; None when no worker serves the queue."""
    if not free_in_s:
        return None
    rounds, slot = divmod(position, len(free_in_s))
    return sorted(max(0.0, s) for s in free_in_s)[slot] + rounds * mean_run_s
