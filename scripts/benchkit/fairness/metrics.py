"""The fairness metrics, as pure functions of the jobs' timestamps.

Every metric is computed from `Run`s only: which account a job belongs to, when it was
submitted (enqueued), started and finished, and on which worker. Between two consecutive
timestamps of any job nothing changes, so the run is cut into `Segment`s on which the set of
backlogged accounts, the jobs running per account and the jobs waiting are constant.

Definitions (docs/fairness.md states them with the same words):

- An account is *backlogged* at time t when one of its jobs has been submitted and has not
  finished (enqueued <= t < finished): waiting or running.
- *Busy capacity* B(t): the number of workers running a job at t. The ideal fluid scheduler
  (weighted GPS) splits exactly this busy capacity among the backlogged accounts A(t) in
  proportion to their weights: account i is owed B(t) * w_i / sum(w_j for j in A(t)) GPU-seconds
  per second while it is backlogged, and it receives r_i(t), the number of its jobs running.
- *Lag* of an account: owed minus received since the start of its current backlog period (a
  maximal interval during which it is continuously backlogged); it starts at 0 at each such
  start, as in the fairness bounds of fair queueing, which hold over intervals in which an
  account stays backlogged. The worst lag is its largest value over all accounts and times.
- *Share / weight*: over the time during which every account of the scenario is backlogged,
  an account's GPU-seconds divided by the GPU-seconds of all, divided by its weight's fraction
  of the total weight. 1 is its exact fair share; the least-served account gives the minimum.
- *Idle GPU-seconds while jobs wait*: the integral of the number of idle workers (workers
  minus busy) over the time during which at least one job has been submitted and not started.
- *Ahead*: for a job, the jobs of other accounts that started after it was submitted and
  before it started.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

EPS = 1e-9


@dataclass(frozen=True)
class Run:
    """One finished job, as its timestamps tell it (seconds, any common origin)."""

    account: str
    enqueued: float
    started: float
    finished: float
    worker: str = ""
    duration: float = 0.0  # the GPU-seconds the job asked for

    @property
    def wait(self) -> float:
        """Seconds from submit to start."""
        return self.started - self.enqueued

    @property
    def charge_rate(self) -> float:
        """GPU-seconds charged per second of its run: what it asked for over how long it ran
        (1 when either is unknown)."""
        length = self.finished - self.started
        return self.duration / length if self.duration > 0 and length > 0 else 1.0


@dataclass(frozen=True)
class Segment:
    """An interval [start, end) on which nothing changes."""

    start: float
    end: float
    running: Mapping[str, int]  # jobs running per account
    outstanding: Mapping[str, int]  # jobs submitted and not finished, per account
    waiting: int  # jobs submitted and not started
    charged: Mapping[str, float] = field(default_factory=dict)  # charge rates of the running

    @property
    def length(self) -> float:
        """Its duration in seconds."""
        return self.end - self.start

    @property
    def busy(self) -> int:
        """Workers running a job."""
        return sum(self.running.values())

    def backlogged(self) -> list[str]:
        """The accounts with a job submitted and not finished."""
        return [a for a, n in self.outstanding.items() if n > 0]


Delta = tuple[str, int, int, int, float]


def _deltas(runs: Iterable[Run]) -> dict[float, list[Delta]]:
    """Per timestamp: (account, outstanding change, running change, waiting change, charge rate
    change)."""
    events: dict[float, list[Delta]] = defaultdict(list)
    for r in runs:
        events[r.enqueued].append((r.account, 1, 0, 1, 0.0))
        events[r.started].append((r.account, 0, 1, -1, r.charge_rate))
        events[r.finished].append((r.account, -1, -1, 0, -r.charge_rate))
    return events


def segments(runs: Sequence[Run]) -> list[Segment]:
    """The run cut at every timestamp, from the first submit to the last finish."""
    events = _deltas(runs)
    times = sorted(events)
    running: dict[str, int] = {r.account: 0 for r in runs}
    outstanding = dict(running)
    charged = dict.fromkeys(running, 0.0)
    waiting = 0
    out: list[Segment] = []
    for t, t_next in itertools.pairwise(times):
        for account, d_out, d_run, d_wait, d_rate in events[t]:
            outstanding[account] += d_out
            running[account] += d_run
            waiting += d_wait
            charged[account] = charged[account] + d_rate if running[account] else 0.0
        out.append(Segment(t, t_next, dict(running), dict(outstanding), waiting, dict(charged)))
    return out


@dataclass
class LagTrace:
    """Lag over time of one account: points (t, lag) at every segment boundary."""

    account: str
    points: list[tuple[float, float]] = field(default_factory=list)

    @property
    def worst(self) -> float:
        """The largest lag it reached (0 when it never had any)."""
        return max((lag for _, lag in self.points), default=0.0)


def _received(seg: Segment, charged: bool) -> Mapping[str, float]:
    """GPU-seconds per second each account receives: its running jobs, or their charge rates."""
    return seg.charged if charged else seg.running


def _owed_rates(seg: Segment, weights: Mapping[str, float], charged: bool) -> dict[str, float]:
    """GPU-seconds per second the ideal weighted share owes each backlogged account."""
    active = seg.backlogged()
    total = sum(weights[a] for a in active)
    if not active or total <= 0:
        return {}
    capacity = sum(_received(seg, charged).values())
    return {a: capacity * weights[a] / total for a in active}


def lag_traces(
    runs: Sequence[Run], weights: Mapping[str, float], *, charged: bool = False
) -> dict[str, LagTrace]:
    """Each account's lag (owed minus received, GPU-seconds) over time; it restarts at 0 at
    the start of each of the account's backlog periods.

    With charged, a running job counts as the GPU-seconds it asked for, spread evenly over its
    run (its charge rate), and the capacity shared out is the sum of those rates: the lag of
    the scheduler's choices, without the noise of runs that took longer than they asked."""
    traces = {a: LagTrace(a) for a in sorted({r.account for r in runs})}
    lag = dict.fromkeys(traces, 0.0)
    was_backlogged = dict.fromkeys(traces, False)
    for seg in segments(runs):
        owed = _owed_rates(seg, weights, charged)
        received = _received(seg, charged)
        for account, trace in traces.items():
            backlogged = seg.outstanding[account] > 0
            if backlogged and not was_backlogged[account]:
                lag[account] = 0.0  # a new backlog period
                trace.points.append((seg.start, 0.0))
            was_backlogged[account] = backlogged
            if not backlogged:
                continue
            lag[account] += (owed[account] - received[account]) * seg.length
            trace.points.append((seg.end, lag[account]))
    return traces


def worst_lag(traces: Mapping[str, LagTrace]) -> tuple[str, float]:
    """The account with the largest lag, and that lag (GPU-seconds)."""
    if not traces:
        return "", 0.0
    account = max(traces, key=lambda a: traces[a].worst)
    return account, traces[account].worst


def concurrency_allowance(runs: Sequence[Run], weights: Mapping[str, float], workers: int) -> float:
    """What non-preemptive workers force, in longest jobs: workers times the largest fraction
    of the total weight that an account held while it and at least one other were backlogged.

    An account that becomes backlogged while every worker runs another's job must wait up to
    one job for the first release, owed its fraction of every busy worker meanwhile."""
    most = 0.0
    for seg in segments(runs):
        active = seg.backlogged()
        if len(active) < 2:
            continue
        total = sum(weights[a] for a in active)
        most = max(most, max(weights[a] for a in active) / total)
    return workers * most


@dataclass(frozen=True)
class ShareResult:
    """Share / weight per account over the time all accounts were backlogged."""

    window_s: float  # seconds during which every account was backlogged
    ratios: Mapping[str, float]

    @property
    def least(self) -> tuple[str, float]:
        """The least-served account and its share / weight (nan when no window)."""
        if not self.ratios:
            return "", math.nan
        account = min(self.ratios, key=lambda a: self.ratios[a])
        return account, self.ratios[account]


def share_over_weight(runs: Sequence[Run], weights: Mapping[str, float]) -> ShareResult:
    """Each account's share of the GPU-seconds given while all of them were backlogged,
    divided by its share of the weight."""
    accounts = sorted({r.account for r in runs})
    got = dict.fromkeys(accounts, 0.0)
    total = window = 0.0
    for seg in segments(runs):
        if all(seg.outstanding[a] > 0 for a in accounts):
            window += seg.length
            total += seg.busy * seg.length
            for a in accounts:
                got[a] += seg.running[a] * seg.length
    if total <= EPS:
        return ShareResult(window, {})
    weight_sum = sum(weights[a] for a in accounts)
    ratios = {a: (got[a] / total) / (weights[a] / weight_sum) for a in accounts}
    return ShareResult(window, ratios)


def idle_while_waiting(runs: Sequence[Run], workers: int) -> float:
    """Worker-seconds with no job running while some job was submitted and not started."""
    return sum(
        (workers - seg.busy) * seg.length
        for seg in segments(runs)
        if seg.waiting > 0 and seg.busy < workers
    )


def dispatch_gaps(runs: Sequence[Run]) -> list[float]:
    """Per worker, the seconds between the end of a job and the start of its next one, for
    the ends at which another job was already waiting (the pause the worker added)."""
    by_worker: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by_worker[r.worker].append(r)
    gaps: list[float] = []
    for jobs in by_worker.values():
        jobs.sort(key=lambda r: r.started)
        for prev, nxt in itertools.pairwise(jobs):
            end = prev.finished
            if any(r.enqueued <= end < r.started for r in runs):
                gaps.append(nxt.started - end)
    return gaps


def ahead_of(job: Run, runs: Iterable[Run]) -> int:
    """Jobs of other accounts that started after this one was submitted, before it started."""
    return sum(
        1 for r in runs if r.account != job.account and job.enqueued < r.started < job.started
    )
