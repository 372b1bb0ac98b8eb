"""A small soak (scripts/soak.py): jobs from three accounts while workers are SIGKILLed and
restarted at random; none lost, none billed twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import child_environment

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(150)]


def test_soak_with_random_worker_kills_loses_nothing_and_bills_nothing_twice(
    tmp_path: Path,
) -> None:
    figures_file = tmp_path / "soak.json"
    command = [
        sys.executable,
        "scripts/soak.py",
        *("--jobs", "60", "--rate", "8", "--workers", "3"),
        *("--kill-every", "1", "2", "--restart-after", "0.2", "1"),
        *("--seed", "7", "--workdir", str(tmp_path / "stack"), "--json", str(figures_file)),
    ]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    run = subprocess.run(
        command,
        cwd=ROOT,
        env={**child_environment(), "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=140,
        check=False,
    )
    print(run.stdout)
    assert run.returncode in (0, 1), run.stderr
    figures = json.loads(figures_file.read_text())
    assert figures["accepted"] == figures["jobs"] == 60
    assert figures["kills"] >= 1
    assert figures["lost"] == 0, figures["lost_ids"]
    assert figures["billed_twice"] == 0
    assert figures["success_not_billed_once"] == 0
    assert figures["failure_billed"] == 0
    assert figures["success"] + figures["failed_after_attempts"] == 60
    assert figures["drained"]
    assert figures["ok"] and run.returncode == 0
