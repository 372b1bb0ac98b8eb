"""When a queued job should start: from its place in line, when each worker serving its queue
is free again, and the queue's recent mean run time.

A worker busy with a job (of either queue) is free again when that job's asked-for duration has
passed; an idle one is free now. The jobs ahead each take one mean run and go, in order, to the
worker that is free first. So worker i starts jobs at f_i, f_i + m, f_i + 2m, ..., and the job at
position p starts at the (p+1)-th smallest of all those times: found by bisection on the time,
counting the starts up to it (a few dozen passes over the workers, whatever p is).
"""

from __future__ import annotations

import math

MIN_RUN_S = 1e-3  # a mean run of no time would let one worker start every job at once
BISECTIONS = 64
ROUNDING = 1e-9


def wait_s(position: int, free_in_s: list[float], mean_run_s: float) -> float | None:
    """Seconds until the job at `position` should start, given in how many seconds each worker
    serving its queue is free; None when no worker serves the queue."""
    if not free_in_s:
        return None
    free = sorted(max(0.0, s) for s in free_in_s)
    run = max(mean_run_s, MIN_RUN_S)
    lo, hi = free[0], free[0] + (position + 1) * run  # by hi, one worker alone starts p+2 jobs
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        if _starts_by(mid, free, run) >= position + 1:
            hi = mid
        else:
            lo = mid
    # hi is within rounding of a start time f + k*run: return that start time exactly.
    return max(f + _runs_by(hi, f, run) * run for f in free if f <= hi)


def _starts_by(t: float, free: list[float], run: float) -> int:
    """How many jobs the workers have started by time t."""
    return sum(_runs_by(t, f, run) + 1 for f in free if f <= t)


def _runs_by(t: float, f: float, run: float) -> int:
    """Whole runs a worker free at f has done by t (a start that rounding puts a hair after t
    counts as at t)."""
    return math.floor((t - f) / run + ROUNDING)
