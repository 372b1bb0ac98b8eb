"""scripts/load.py against a real stack on a tiny input: it exits 0 and prints its report
(no timing is checked)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.dev.stack import Stack
from tests.support import DEMO_KEY, TEAM_KEY, fast_settings

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """A whole stack with two CPU workers on its own embedded Redis."""
    with Stack(fast_settings(), use_given_redis=False, workers=2, workdir=tmp_path) as running:
        yield running


def test_load_reports_throughput_and_its_three_tables(stack: Stack) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "scripts/load.py",
            "--url",
            stack.url,
            "--jobs",
            "6",
            "--short-s",
            "0.1",
            "--long-s",
            "0.3",
            "--long-fraction",
            "0.34",
            "--key",
            f"{DEMO_KEY},{TEAM_KEY}",
            "--poll-s",
            "0.2",
            "--timeout",
            "30",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "6 jobs in " in out
    assert " jobs/min" in out
    assert "queue   jobs   wait p50 (s)   wait p95 (s)" in out
    assert "short      4" in out
    assert "long       2" in out
    assert "worker" in out
    assert "busy (s)   busy %" in out
    assert "cpu1@" in out or "cpu2@" in out
    assert "account" in out
    assert "GPU-s" in out
    assert "11111111-1111-1111-1111-111111111111" in out
    assert "33333333-3333-3333-3333-333333333333" in out
    assert "did not succeed" not in out
