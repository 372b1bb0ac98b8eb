"""PNG plots of the results (matplotlib, Agg backend): docs/img/bench-*.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from scripts.benchkit.report import Report


def _cdf(ax: Any, values: list[float], label: str) -> None:
    ordered = sorted(values)
    if ordered:
        ax.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=label)


def gap(report: Report, folder: Path) -> Path:
    """CDFs of the busy gap and the idle start, fair against plain."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, field, title in zip(
        axes,
        ("gaps_ms", "idle_ms"),
        ("busy worker: end to next start", "idle worker: submit to start"),
        strict=True,
    ):
        for variant, data in report.data.items():
            _cdf(ax, data[field], variant)
        ax.set(title=title, xlabel="ms", ylabel="fraction of jobs", xlim=(0, 10))
        ax.axvline(2.0, color="grey", linestyle=":")
        ax.axvline(5.0, color="grey", linestyle="--")
        ax.legend()
    return _save(fig, folder / "bench-gap.png")


def scaling(report: Report, folder: Path) -> Path:
    """Redis µs per job against depth (per account count) and against accounts (largest depth)."""
    points = report.data["points"]
    fig, (by_depth, by_accounts) = plt.subplots(1, 2, figsize=(10, 4))
    largest = max(p["depth"] for p in points)
    for accounts in sorted({p["accounts"] for p in points if p["depth"] != largest} or {1}):
        row = sorted((p["depth"], p["redis_us"]) for p in points if p["accounts"] == accounts)
        by_depth.plot(
            *zip(*row, strict=True), marker="o", label=f"fair queue, {accounts:,} account(s)"
        )
    base = sorted((p["depth"], p["base_us"]) for p in points if p["accounts"] == 1)
    by_depth.plot(*zip(*base, strict=True), marker="x", linestyle="--", label="Redis list")
    by_depth.set(title="cost per job by queued jobs", xlabel="queued jobs",
                 ylabel="Redis µs per job", xscale="log", ylim=(0, None))  # fmt: skip
    at_largest = sorted(
        (p["accounts"], p["redis_us"], p["base_us"]) for p in points if p["depth"] == largest
    )
    xs = [a for a, _, _ in at_largest]
    by_accounts.plot(xs, [r for _, r, _ in at_largest], marker="o", label="fair queue")
    by_accounts.plot(
        xs, [b for _, _, b in at_largest], marker="x", linestyle="--", label="Redis list"
    )
    by_accounts.set(title=f"cost per job by accounts, {largest:,} queued", xlabel="accounts",
                    ylabel="Redis µs per job", xscale="log", ylim=(0, None))  # fmt: skip
    for ax in (by_depth, by_accounts):
        ax.legend()
    return _save(fig, folder / "bench-scaling.png")


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def from_saved(path: Path) -> list[Report]:
    """The reports a --save file holds (enough of them to plot)."""
    return [Report(r["name"], data=r["data"]) for r in json.loads(path.read_text())]


def write(reports: list[Report], folder: Path) -> list[Path]:
    """Every plot the reports have data for."""
    makers = {"gap": gap, "scaling": scaling}
    return [makers[r.name](r, folder) for r in reports if r.name in makers]
