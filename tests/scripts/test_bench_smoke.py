"""The benchmark scripts run on a tiny input and print their tables (no timing is checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.vtrr.conftest import redis7_binary

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration  # a subprocess, with a redis-server of its own
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


def run_bench(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`scripts/bench.py --quick ...`, as the docs run it."""
    return subprocess.run(
        [sys.executable, "scripts/bench.py", "--quick", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("only", "expected"),
    [
        (
            ("throughput", "gap"),
            ("throughput: no-op jobs", "gap: dispatch gap", "fair / plain", "busy gap p50"),
        ),
        (
            ("enqueue",),
            (
                "enqueue: POST /enqueue-task",
                "baseline-http",
                "handler-only",
                "fairgpu-2proc",
                "target",
            ),
        ),
        (("sse",), ("sse: 30 open streams", "KiB/stream", "delivery p50 ms", "fairgpu / baseline")),
    ],
    ids=["throughput+gap", "enqueue", "sse"],
)
def test_bench_quick_prints_its_tables(only: tuple[str, ...], expected: tuple[str, ...]) -> None:
    run = run_bench("--only", *only)
    assert run.returncode == 0, run.stderr[-3000:]
    for text in expected:
        assert text in run.stdout, f"{text!r} missing from:\n{run.stdout}"


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_bench_scaling_quick_writes_json_and_a_plot(tmp_path: Path) -> None:
    run = run_bench("--only", "scaling", "gap", "--json", "--plots", tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    reports = {r["name"]: r for r in json.loads(run.stdout)}
    assert set(reports) == {"scaling", "gap"}
    (table,) = reports["scaling"]["tables"]
    assert table["columns"][:3] == ["depth", "accounts", "Redis µs/job"]
    assert len(table["rows"]) == 5
    assert reports["gap"]["data"]["fair"]["idle_ms"]
    assert (tmp_path / "bench-scaling.png").stat().st_size > 0
    assert (tmp_path / "bench-gap.png").stat().st_size > 0


@pytest.mark.integration  # a subprocess, with a redis-server of its own
@pytest.mark.timeout(120)
def test_bench_drain_prints_both_variants_and_their_ratio() -> None:
    run = subprocess.run(
        [sys.executable, "scripts/bench_drain.py", "--rounds", "2", "--items", "20"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["one call", "two calls"]
    assert lines[2].startswith("one call / two calls = ")


@pytest.mark.integration  # a subprocess, with a redis-server of its own
@pytest.mark.timeout(120)
def test_bench_dequeue_floor_prints_its_three_variants_and_their_ratios() -> None:
    binary = redis7_binary()
    if binary is None:
        pytest.skip("no Redis 7 on PATH: the floor's functions need one")
    run = subprocess.run(
        [sys.executable, "scripts/bench_dequeue_floor.py", "--rounds", "2", "--items", "30"]
        + ["--partitions", "3", "--redis-server", binary],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["library", "flat", "floor"]
    assert [line.split(" = ")[0] for line in lines[3:]] == [
        "library / floor",
        "library / flat",
        "flat / floor",
    ]
    assert all(float(line.split(" = ")[1]) > 0 for line in lines[3:])
