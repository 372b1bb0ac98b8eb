"""Run one fairness scenario of scripts/load.py as a newcomer would, for the scenario tests."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.scripts.test_fairness_smoke import ROOT
from tests.support import child_environment


def scenario(name: str, scale: str) -> tuple[list[dict[str, Any]], str]:
    """`scripts/load.py --scenario NAME --scale SCALE --json`'s outcomes of that scenario, and
    its tables (stderr); the test fails, with the command's output, unless it exits 0."""
    run = subprocess.run(
        [sys.executable, "scripts/load.py", "--scenario", name, "--scale", scale, "--json"],
        cwd=ROOT,
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    outcomes: list[dict[str, Any]] = json.loads(run.stdout)["scenarios"][name]
    return outcomes, run.stderr
