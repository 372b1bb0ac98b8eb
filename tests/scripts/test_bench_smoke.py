"""The benchmark scripts run on a tiny input and print their tables (no timing is checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_bench_vtrr_quick_prints_its_table_and_verdicts() -> None:
    run = subprocess.run(
        [sys.executable, "scripts/bench_vtrr.py", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "| depth | partitions | op |" in run.stdout
    assert "dequeue+ack" in run.stdout
    assert "Target 1:" in run.stdout
    assert "Target 2:" in run.stdout
