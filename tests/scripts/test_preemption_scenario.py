"""scripts/load.py --scenario preemption at its smallest: both stacks run (with preemption and
without), every job ends SUCCESS and is billed once (the scenario raises otherwise), and the
report has a row for each. No timing is checked: the waits are the full run's to report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.scripts.test_fairness_smoke import ROOT
from tests.support import child_environment

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_the_preemption_scenario_runs_with_and_without_preemption() -> None:
    run = subprocess.run(
        [sys.executable, "scripts/load.py", "--scenario", "preemption", "--scale", "0.1", "--json"],
        cwd=ROOT,
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    outcomes = {o["system"]: o for o in json.loads(run.stdout)["scenarios"]["preemption"]}
    assert set(outcomes) == {"fairgpu+preemption", "fairgpu"}
    for outcome in outcomes.values():
        assert outcome["shorts"] >= 2
        assert outcome["jobs"] > outcome["shorts"]  # the long jobs too, each checked
    assert outcomes["fairgpu"]["preemptions"] == 0  # the policy is off there: never asked
    assert "short jobs' wait without / with preemption" in run.stderr
