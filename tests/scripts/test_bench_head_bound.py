"""scripts/bench_head_bound.py runs on a tiny input and prints both variants and the difference
(no timing is checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration  # a subprocess
@pytest.mark.timeout(120)
def test_bench_head_bound_prints_both_variants_and_the_difference() -> None:
    run = subprocess.run(
        [sys.executable, "scripts/bench_head_bound.py", "--rounds", "2", "--requests", "50"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["uvicorn", "head-bound"]
    assert lines[2].startswith("the bound costs ")
