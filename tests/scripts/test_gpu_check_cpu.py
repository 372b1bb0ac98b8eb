"""scripts/gpu_check.py as one tries it on a machine without a GPU: `--cpu` runs to its end
with or without torch (without it, the jobs that need torch are left out, and said to be), its
Redis on the port given, and the child replacements it reports include the CHILD_PER_JOB burst.
Without `--cpu` and without torch it says in one line what to run instead."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.dev.redis_server import free_port
from scripts.benchkit.gpu_check import FRESH_JOBS, NO_TORCH_SKIPS, TORCH_NEEDED
from tests.scripts.test_fairness_smoke import ROOT
from tests.support import child_environment

NO_TORCH = importlib.util.find_spec("torch") is None


def gpu_check(*options: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "scripts/gpu_check.py", *options],
        cwd=ROOT,
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_cpu_check_runs_to_its_end_and_counts_the_fresh_children(tmp_path: Path) -> None:
    redis_port = free_port()
    run = gpu_check("--cpu", "--out", str(tmp_path), "--redis-port", str(redis_port), timeout=290)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert all(results["verdicts"].values()), results["verdicts"]
    assert results["redis_url"] == f"redis://127.0.0.1:{redis_port}/0"
    # read after the CHILD_PER_JOB burst: each of its jobs had a fresh child
    assert results["replacements"]["per_job"] == FRESH_JOBS
    if NO_TORCH:
        assert results["machine"]["torch"] == "not installed"
        assert results["skipped"] == NO_TORCH_SKIPS
        assert "left out, torch not being installed" in (tmp_path / "gpu_check.md").read_text()


@pytest.mark.skipif(not NO_TORCH, reason="torch is installed here")
def test_without_cpu_and_without_torch_it_says_what_to_run_in_one_line(tmp_path: Path) -> None:
    run = gpu_check("--out", str(tmp_path), timeout=60)
    assert run.returncode == 2
    assert run.stderr.splitlines() == [TORCH_NEEDED]
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written
