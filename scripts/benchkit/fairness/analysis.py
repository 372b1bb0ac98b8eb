"""A scenario's measured runs turned into the report's numbers, and the targets checked."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scripts.benchkit.fairness import metrics as m
from scripts.benchkit.fairness.scenarios import Scenario
from scripts.benchkit.stats import percentile

SHARE_TARGET = 0.99


def rebase(runs: Sequence[m.Run]) -> list[m.Run]:
    """The runs with times counted from the first submit."""
    t0 = min(r.enqueued for r in runs)
    return [
        replace(r, enqueued=r.enqueued - t0, started=r.started - t0, finished=r.finished - t0)
        for r in runs
    ]


def first_release(job: m.Run, runs: Sequence[m.Run], workers: int) -> float:
    """When a worker was first free after the job was submitted: at once if one was idle then,
    else the first end of another job after it."""
    running = sum(1 for r in runs if r is not job and r.started <= job.enqueued < r.finished)
    if running < workers:
        return job.enqueued
    return min(r.finished for r in runs if r.finished >= job.enqueued)


@dataclass
class Result:
    """One system's numbers for one scenario."""

    system: str
    runs: list[m.Run]
    numbers: dict[str, Any] = field(default_factory=dict)
    lag: dict[str, m.LagTrace] = field(default_factory=dict)


def _lag_numbers(scenario: Scenario, runs: Sequence[m.Run], workers: int) -> dict[str, Any]:
    account, worst = m.worst_lag(m.lag_traces(runs, scenario.weights))
    charged_account, charged = m.worst_lag(m.lag_traces(runs, scenario.weights, charged=True))
    longest = scenario.longest_job
    allowance = m.concurrency_allowance(runs, scenario.weights, workers)
    return {
        "longest_job_s": longest,
        "longest_run_s": max(r.finished - r.started for r in runs),
        "worst_lag_s": worst,
        "worst_lag_account": account,
        "worst_lag_jobs": worst / longest,
        "worst_charged_lag_jobs": charged / longest,
        "worst_charged_lag_account": charged_account,
        "lag_allowance_jobs": allowance,
        "lag_bound_jobs": allowance + 1,
    }


def _share_numbers(scenario: Scenario, runs: Sequence[m.Run]) -> dict[str, Any]:
    share = m.share_over_weight(runs, scenario.weights)
    account, least = share.least
    return {
        "share_window_s": share.window_s,
        "least_share_account": account,
        "least_share_over_weight": least,
        "share_over_weight": dict(share.ratios),
    }


def _light_numbers(scenario: Scenario, runs: Sequence[m.Run], workers: int) -> dict[str, Any]:
    light = sorted((r for r in runs if r.account in scenario.light), key=lambda r: r.enqueued)
    waits = [r.wait for r in light]
    return {
        "light_accounts": list(scenario.light),
        "light_jobs": len(light),
        "light_wait_p50_s": percentile(waits, 50),
        "light_wait_p99_s": percentile(waits, 99),
        "light_wait_max_s": max(waits, default=math.nan),
        "light_waits_s": waits,
        "light_submits_s": [r.enqueued for r in light],
        "light_ahead": [m.ahead_of(r, runs) for r in light],
        "light_after_release_s": [r.started - first_release(r, runs, workers) for r in light],
    }


def _idle_numbers(runs: Sequence[m.Run], workers: int) -> dict[str, Any]:
    idle = m.idle_while_waiting(runs, workers)
    gaps = m.dispatch_gaps(runs)
    return {
        "idle_while_waiting_s": idle,
        "idle_per_job_ms": idle / len(runs) * 1000,
        "dispatch_gaps": len(gaps),
        "dispatch_gap_p50_ms": percentile(gaps, 50) * 1000,
        "dispatch_gap_p99_ms": percentile(gaps, 99) * 1000,
        "dispatch_gap_max_ms": max(gaps, default=math.nan) * 1000,
    }


def analyse(system: str, scenario: Scenario, raw: Sequence[m.Run], workers: int) -> Result:
    """Every number of the report for one system's run of a scenario."""
    runs = rebase(raw)
    makespan = max(r.finished for r in runs)
    busy = sum(r.finished - r.started for r in runs)
    numbers: dict[str, Any] = {
        "jobs": len(runs),
        "makespan_s": makespan,
        "busy_fraction": busy / (workers * makespan) if makespan > 0 else math.nan,
        **_lag_numbers(scenario, runs, workers),
        **_share_numbers(scenario, runs),
        **_light_numbers(scenario, runs, workers),
        **_idle_numbers(runs, workers),
    }
    return Result(system, runs, numbers, m.lag_traces(runs, scenario.weights))


@dataclass(frozen=True)
class Verdict:
    """One target of the issue, checked on fairgpu's numbers."""

    target: str
    value: str
    met: bool


def _lag_verdicts(fair: dict[str, Any]) -> list[Verdict]:
    """The lag target, on the GPU-seconds as run and as charged."""
    bound = fair["lag_bound_jobs"]
    target = (
        f"worst lag <= 1 job beyond non-preemption ({fair['lag_allowance_jobs']:.2f}),"
        f" i.e. <= {bound:.2f} jobs"
    )
    as_run, charged = fair["worst_lag_jobs"], fair["worst_charged_lag_jobs"]
    return [
        Verdict(
            target + ", GPU-seconds as run",
            f"{as_run:.2f} jobs ({fair['worst_lag_account']}); longest run "
            f"{fair['longest_run_s']:.3f} s",
            as_run <= bound,
        ),
        Verdict(
            target + ", as charged",
            f"{charged:.2f} jobs ({fair['worst_charged_lag_account']})",
            charged <= bound,
        ),
    ]


def verdicts(scenario: Scenario, fair: dict[str, Any]) -> list[Verdict]:
    """The targets that apply to this scenario, checked."""
    out: list[Verdict] = []
    if "first_release" in scenario.targets:
        ahead = fair["light_ahead"]
        out.append(
            Verdict(
                "light job starts at the first GPU release after it arrives",
                f"jobs of others started ahead of the light jobs: {ahead}; first light job "
                f"{fair['light_after_release_s'][0] * 1000:.1f} ms after the first release",
                bool(ahead) and ahead[0] == 0,
            )
        )
    if "lag" in scenario.targets:
        out += _lag_verdicts(fair)
    if "share" in scenario.targets:
        least = fair["least_share_over_weight"]
        out.append(
            Verdict(
                f"least share/weight >= {SHARE_TARGET}",
                f"{least:.4f} ({fair['least_share_account']})",
                least >= SHARE_TARGET,
            )
        )
    if "idle" in scenario.targets:
        idle = fair["idle_while_waiting_s"]
        out.append(
            Verdict(
                "zero idle GPU-seconds while jobs wait",
                f"{idle:.3f} s ({fair['idle_per_job_ms']:.1f} ms per job; dispatch gap p50 "
                f"{fair['dispatch_gap_p50_ms']:.1f} ms, max {fair['dispatch_gap_max_ms']:.1f} ms)",
                idle == 0,
            )
        )
    return out
