"""The report: rich tables, JSON, Markdown, and PNG plots."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from scripts.benchkit.fairness.analysis import Result, Verdict
from scripts.benchkit.fairness.scenarios import Scenario
from scripts.benchkit.report import json_safe

SYSTEMS = ("fairgpu", "fifo")


def _f(value: Any, digits: int = 2) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def metric_rows(numbers: dict[str, dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(label, one cell per system) for the table of one scenario."""

    def row(label: str, fmt: Any) -> tuple[str, list[str]]:
        return label, [fmt(numbers[s]) for s in SYSTEMS]

    return [
        row("jobs", lambda n: str(n["jobs"])),
        row("makespan (s)", lambda n: _f(n["makespan_s"])),
        row("workers busy (%)", lambda n: _f(n["busy_fraction"] * 100, 1)),
        row(
            "worst lag / longest job",
            lambda n: f"{_f(n['worst_lag_jobs'])} ({n['worst_lag_account']})",
        ),
        row(
            "  as charged",
            lambda n: f"{_f(n['worst_charged_lag_jobs'])} ({n['worst_charged_lag_account']})",
        ),
        row("longest run (s)", lambda n: _f(n["longest_run_s"], 3)),
        row(
            "least share / weight",
            lambda n: f"{_f(n['least_share_over_weight'], 4)} ({n['least_share_account']})",
        ),
        row("  over a window of (s)", lambda n: _f(n["share_window_s"])),
        row(
            "light wait p50 / p99 / max (s)",
            lambda n: " / ".join(
                _f(n[k], 3) for k in ("light_wait_p50_s", "light_wait_p99_s", "light_wait_max_s")
            ),
        ),
        row("light: others' jobs started ahead (max)", lambda n: str(max(n["light_ahead"]))),
        row("idle GPU-s while jobs wait", lambda n: _f(n["idle_while_waiting_s"], 3)),
        row("  per job (ms)", lambda n: _f(n["idle_per_job_ms"], 1)),
        row(
            "  dispatch gap p50 / p99 / max (ms)",
            lambda n: " / ".join(
                _f(n[k], 1)
                for k in ("dispatch_gap_p50_ms", "dispatch_gap_p99_ms", "dispatch_gap_max_ms")
            ),
        ),
    ]


def print_tables(
    console: Console,
    scenario: Scenario,
    results: dict[str, Result],
    checks: Sequence[Verdict],
) -> None:
    """The scenario's numbers for both systems, then its targets."""
    numbers = {s: results[s].numbers for s in SYSTEMS}
    table = Table(title=f"{scenario.name}: {scenario.summary}", title_justify="left")
    table.add_column("metric")
    for s in SYSTEMS:
        table.add_column(s, justify="right")
    for label, cells in metric_rows(numbers):
        table.add_row(label, *cells)
    console.print(table)
    targets = Table(title=f"{scenario.name}: targets (fairgpu)", title_justify="left")
    for col in ("target", "measured", "met"):
        targets.add_column(col)
    for v in checks:
        targets.add_row(v.target, v.value, "yes" if v.met else "NO")
    console.print(targets)


def markdown(scenario: Scenario, results: dict[str, Result], checks: Sequence[Verdict]) -> str:
    """The same tables in Markdown, for docs/fairness.md."""
    numbers = {s: results[s].numbers for s in SYSTEMS}
    lines = [f"| {scenario.name} | fairgpu | FIFO |", "|---|---:|---:|"]
    lines += [f"| {label} | {' | '.join(cells)} |" for label, cells in metric_rows(numbers)]
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {v.target} | {v.value} | {'yes' if v.met else 'no'} |" for v in checks]
    return "\n".join(lines)


def as_json(run: dict[str, Any]) -> str:
    """The whole run as JSON (NaN as null)."""
    return json.dumps(json_safe(run), indent=2)


def scenario_json(
    scenario: Scenario, results: dict[str, Result], checks: Sequence[Verdict], runs: bool = False
) -> dict[str, Any]:
    """One scenario's part of the JSON; with runs, every job's timestamps as
    [account, enqueued, started, finished, worker] (seconds from the first submit)."""
    out: dict[str, Any] = {
        "summary": scenario.summary,
        "accounts": {a.name: {"share": a.share, "keys": a.keys} for a in scenario.accounts},
        "light": list(scenario.light),
        **{s: dict(results[s].numbers) for s in SYSTEMS},
        "targets": [asdict(v) for v in checks],
    }
    if runs:
        for s in SYSTEMS:
            out[s]["runs"] = [
                [r.account, r.enqueued, r.started, r.finished, r.worker] for r in results[s].runs
            ]
    return out


def plot(scenario: Scenario, results: dict[str, Result], out_dir: Path) -> list[Path]:
    """fairness-<name>-wait.png and fairness-<name>-lag.png in out_dir."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        _plot_waits(scenario, results, out_dir / f"fairness-{scenario.name}-wait.png"),
        _plot_lag(scenario, results, out_dir / f"fairness-{scenario.name}-lag.png"),
    ]


def _plot_waits(scenario: Scenario, results: dict[str, Result], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for system, style in zip(SYSTEMS, ("o", "x"), strict=True):
        n = results[system].numbers
        waits = [max(w, 1e-4) for w in n["light_waits_s"]]
        left.plot(n["light_submits_s"], waits, style, label=system, alpha=0.7)
        ordered = sorted(waits)
        cdf = [(i + 1) / len(ordered) for i in range(len(ordered))]
        right.step(ordered, cdf, where="post", label=system)
    who = ", ".join(scenario.light)
    left.set(
        title=f"{scenario.name}: wait of {who}'s jobs",
        xlabel="submitted at (s from the first submit)",
        ylabel="submit to start (s)",
        yscale="log",
    )
    right.set(title="CDF of that wait", xlabel="submit to start (s)", ylabel="fraction of jobs")
    right.set_xscale("log")
    longest = scenario.longest_job
    label = f"one job ({longest:g} s)"
    left.axhline(longest, color="grey", ls=":", lw=1, label=label)
    right.axvline(longest, color="grey", ls=":", lw=1, label=label)
    for ax in (left, right):
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _plot_lag(scenario: Scenario, results: dict[str, Result], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    longest = scenario.longest_job
    for ax, system in zip(axes, SYSTEMS, strict=True):
        result = results[system]
        for account, trace in result.lag.items():
            xs = [t for t, _ in trace.points]
            ys = [lag / longest for _, lag in trace.points]
            ax.plot(xs, ys, lw=0.8, label=account)
        bound = result.numbers["lag_bound_jobs"]
        ax.axhline(bound, color="grey", ls=":", lw=1, label=f"target {bound:.2f}")
        ax.set(
            title=f"{scenario.name} on {system}: lag per account",
            xlabel="time (s from the first submit)",
            ylabel="lag (longest jobs)",
        )
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
