"""scripts/load.py --scenario on a tiny input: it starts its own fairgpu stack and FIFO
workers, runs every scenario on both, and prints its tables, JSON, Markdown and plots (no
timing is checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import child_environment

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("balanced", "skew", "sybil", "weighted", "trickle", "burst")
METRICS = (
    "jobs",
    "worst_lag_jobs",
    "lag_bound_jobs",
    "least_share_over_weight",
    "light_wait_p50_s",
    "light_wait_p99_s",
    "light_wait_max_s",
    "idle_while_waiting_s",
    "dispatch_gap_p50_ms",
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def test_every_scenario_runs_on_both_systems_and_reports(tmp_path: Path) -> None:
    plots, tables = tmp_path / "img", tmp_path / "tables.md"
    run = subprocess.run(
        [
            sys.executable,
            "scripts/load.py",
            "--scenario",
            "all",
            "--scale",
            "0.02",
            "--job-s",
            "0.02",
            "--json",
            "--plots",
            str(plots),
            "--markdown",
            str(tables),
        ],
        cwd=ROOT,
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=140,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(run.stdout)  # with --json, stdout holds only the JSON
    assert report["params"] == {"job_s": 0.02, "scale": 0.02, "workers": 2}
    assert set(report["scenarios"]) == {*SCENARIOS, "reshare"}
    reshared = report["scenarios"].pop("reshare")  # fairgpu alone: a FIFO queue has no shares
    assert reshared["jobs"] > 0 and 0 < reshared["changed_after"] < reshared["jobs"]
    assert {"b_share_before", "b_share_after", "worst_jobs_off"} <= set(reshared)
    assert (plots / "fairness-reshare.png").stat().st_size > 0
    assert "reshare: " in run.stderr
    for name, scenario in report["scenarios"].items():
        for system in ("fairgpu", "fifo"):
            numbers = scenario[system]
            assert numbers["jobs"] > 0, (name, system)
            assert all(key in numbers for key in METRICS), (name, system)
        assert scenario["targets"], name
        assert all({"target", "value", "met"} <= set(t) for t in scenario["targets"])
    # the tables (on stderr with --json), the Markdown file and two plots per scenario
    for name in SCENARIOS:
        assert f"{name}: targets (fairgpu)" in run.stderr
        assert f"| {name} | fairgpu | FIFO |" in tables.read_text()
        for kind in ("wait", "lag"):
            assert (plots / f"fairness-{name}-{kind}.png").stat().st_size > 0
    assert "worst lag / longest job" in run.stderr
    assert "light wait p50 / p99 / max (s)" in run.stderr
    assert "idle GPU-s while jobs wait" in run.stderr
