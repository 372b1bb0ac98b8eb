"""scripts/load.py --scenario memory: fair share with memory lets the account that did not burst
have the burst's worth of service first; today's rule and FIFO forget it (no timing checked:
what is compared is which jobs started before which)."""

from __future__ import annotations

import pytest

from tests.scripts.scenario_run import scenario

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_memory_gives_the_light_account_the_heavy_ones_burst_first() -> None:
    found, tables = scenario("memory", "0.4")
    outcomes = {o["system"]: o for o in found}
    assert set(outcomes) == {"fairgpu", "fairgpu+memory", "fifo"}
    burst = outcomes["fairgpu"]["burst_s"]
    assert burst > 0
    assert outcomes["fairgpu+memory"]["light_first_s"] >= 0.8 * burst
    job_s = 0.05  # MIN_JOB_S: without memory, at most the one job the other worker took first
    for forgetful in ("fairgpu", "fifo"):
        assert outcomes[forgetful]["light_first_s"] <= job_s + 1e-9, forgetful
    assert "memory: heavy used" in tables
