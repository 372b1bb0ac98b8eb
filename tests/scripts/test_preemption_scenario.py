"""scripts/load.py --scenario preemption at its smallest: both stacks run (with preemption and
without), every job ends SUCCESS and is billed once (the scenario raises otherwise), and the
report has a row for each. No timing is checked: the waits are the full run's to report."""

from __future__ import annotations

import pytest

from tests.scripts.scenario_run import scenario

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_the_preemption_scenario_runs_with_and_without_preemption() -> None:
    found, tables = scenario("preemption", "0.1")
    outcomes = {o["system"]: o for o in found}
    assert set(outcomes) == {"fairgpu+preemption", "fairgpu"}
    for outcome in outcomes.values():
        assert outcome["shorts"] >= 2
        assert outcome["jobs"] > outcome["shorts"]  # the long jobs too, each checked
    assert outcomes["fairgpu"]["preemptions"] == 0  # the policy is off there: never asked
    assert "short jobs' wait without / with preemption" in tables
