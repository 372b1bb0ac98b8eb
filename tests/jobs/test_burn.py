"""The burn job type's workload: a sleep on a CPU worker, bf16 matrix products on a GPU (run
here on torch's CPU device where torch is installed; scripts/gpu_check.py runs it on a GPU)."""

from __future__ import annotations

import pytest

from app.jobs.builtin.burn import matmul, run


def test_cpu_workload_sleeps_for_its_duration() -> None:
    outcome = run(False, 0.05)
    assert outcome.seconds >= 0.05
    assert outcome.tflops is None
    assert not outcome.stopped


def test_cpu_workload_stops_when_asked() -> None:
    outcome = run(False, 30, should_stop=lambda: True)
    assert outcome.stopped
    assert outcome.seconds < 30


def test_matmul_workload_runs_for_its_duration_and_reports_tflops() -> None:
    """The GPU workload's loop, run on torch's CPU device (skipped where torch is absent)."""
    pytest.importorskip("torch")
    outcome = matmul("cpu", 64, 0.2, should_stop=lambda: False)
    assert outcome.seconds >= 0.2
    assert outcome.tflops is not None
    assert outcome.tflops > 0
    assert not outcome.stopped


def test_matmul_workload_stops_when_asked() -> None:
    pytest.importorskip("torch")
    outcome = matmul("cpu", 64, 30, should_stop=lambda: True)
    assert outcome.stopped
    assert outcome.seconds < 30
