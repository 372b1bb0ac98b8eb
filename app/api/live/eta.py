"""When a queued job should start: from the declared work ahead of it, when each worker serving
its queue is free again, and, for a worker that also serves the other queue, what the short-first
policy (app/wiring/short_first.py) makes it run of that queue in between.

The work ahead comes from running sums, not from a read of the jobs ahead: each fair queue keeps
the count and the summed weight (declared GPU-milliseconds, at least 1 s a job) of its queued
jobs. The p jobs ahead of a job are taken as p jobs of the mean declared length of the other jobs
queued (work_ahead_s). That is exact when the queued jobs are alike, and a burst of tiny jobs
counts as tiny jobs, not as the length of whatever ran last (a mean of recent runs did that);
what it cannot see is the order of unlike jobs, so a job ahead of a few big ones is told a
little late and one behind them a little early. A sub-second job counts as 1 s, as it is charged.

Each worker starts its k-th job of the queue (k = 0, 1, ...) at start(k), increasing in k:
- a worker of this queue only: f + k·a (f: when it is free, a: the mean job ahead);
- a shared worker, for short: f + k·a + L(k)·o, where L(k) = min(m, ⌊k / (N-1)⌋) long jobs of
  mean length o go between short ones (long's one dispatch in N, LONG_EVERY), m being its part
  of the long jobs queued (all of them first when N = 1);
- a shared worker, for long: f + k·a + S(k)·o, where S(k) = min(m, (k+1)(N-1)) short jobs of
  mean length o go before each long one while short jobs wait.
The job at position p starts at the (p+1)-th smallest start of all workers: found by bisection
on the time, counting each worker's starts up to it by bisection on k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

MIN_RUN_S = 1e-3  # a mean run of no time would let one worker start every job at once
BISECTIONS = 64


@dataclass(frozen=True)
class Line:
    """A queue as the estimate sees it: how many jobs are queued and their declared seconds."""

    jobs: int = 0
    seconds: float = 0.0

    @property
    def mean_s(self) -> float:
        """The mean declared length of a queued job (0 when none is queued)."""
        return self.seconds / self.jobs if self.jobs > 0 else 0.0


@dataclass(frozen=True)
class Worker:
    """A live worker of the job's queue: in how many seconds it is free, and whether it also
    serves the other queue."""

    free_in_s: float
    shared: bool = False


def work_ahead_s(position: int, line: Line, own_s: float) -> float:
    """The declared seconds of the `position` jobs ahead of a job of `own_s` seconds in `line`:
    position x the mean of the other queued jobs (see the module's docstring)."""
    others = line.jobs - 1
    if position <= 0 or others <= 0:
        return 0.0
    return position * max(0.0, line.seconds - own_s) / others


def wait_s(
    kind: Literal["short", "long"],
    position: int,
    ahead_s: float,
    workers: list[Worker],
    other: Line,
    long_every: int,
) -> float | None:
    """Seconds until the job at `position` should start, given the declared work ahead of it,
    the workers of its queue and the other queue's line; None when no worker serves the queue."""
    if not workers:
        return None
    run = max(ahead_s / position if position > 0 else 0.0, MIN_RUN_S)
    shared = sum(w.shared for w in workers)
    mine = math.ceil(other.jobs / shared) if shared else 0  # the other queue's jobs, shared out
    starts = [_schedule(kind, w, run, other.mean_s, mine, long_every) for w in workers]
    lo = min(s(0) for s in starts)
    hi = min(s(position) for s in starts)  # by then, one worker alone has started p+1 jobs
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        if sum(_count(s, mid, position) for s in starts) >= position + 1:
            hi = mid
        else:
            lo = mid
    # hi is at or just past the answer, a start of some worker: return that start exactly.
    return max(s(_count(s, hi, position) - 1) for s in starts if s(0) <= hi)


class _Start:
    """One worker's k-th start time, as the module's docstring gives it."""

    def __init__(
        self, free: float, run: float, other_s: float, share: int, extra: str, n: int
    ) -> None:
        self.free, self.run, self.other_s, self.share, self.extra, self.n = (
            free, run, other_s, share, extra, n,
        )  # fmt: skip

    def __call__(self, k: int) -> float:
        between = 0
        if self.extra == "long":  # long jobs between this worker's short ones
            between = self.share if self.n <= 1 else min(self.share, k // (self.n - 1))
        elif self.extra == "short":  # short jobs before each of this worker's long ones
            between = min(self.share, (k + 1) * (self.n - 1))
        return self.free + k * self.run + between * self.other_s


def _schedule(kind: str, w: Worker, run: float, other_s: float, share: int, n: int) -> _Start:
    extra = ("long" if kind == "short" else "short") if w.shared else ""
    return _Start(max(0.0, w.free_in_s), run, other_s, share, extra, n)


def _count(start: _Start, t: float, position: int) -> int:
    """How many of the worker's first position+1 starts are at or before t."""
    if start(0) > t:
        return 0
    lo, hi = 0, position  # start(lo) <= t
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if start(mid) <= t:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1
