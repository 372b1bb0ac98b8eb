"""The worker's device choice and the CPU workload; the GPU path runs on a GPU machine only."""

from __future__ import annotations

import pytest

from app.worker import gpu


def no_cuda() -> int:
    return 0


def one_cuda() -> int:
    return 1


def two_cuda() -> int:
    return 2


@pytest.mark.parametrize("env", [{}, {"CUDA_VISIBLE_DEVICES": ""}, {"CUDA_VISIBLE_DEVICES": "-1"}])
def test_no_device_named_and_none_seen_makes_a_cpu_worker(env: dict[str, str]) -> None:
    device = gpu.choose_device(env, no_cuda)
    assert device == gpu.CPU
    assert device.label == "cpu"


def test_one_device_named_makes_a_gpu_worker_with_the_hosts_number() -> None:
    device = gpu.choose_device({"CUDA_VISIBLE_DEVICES": "1"}, one_cuda)
    assert device.gpu_id == 1
    assert device.label == "gpu1"


@pytest.mark.parametrize("value", ["0,1", "0, 1", "2,3,4"])
def test_a_worker_refuses_more_than_one_device(value: str) -> None:
    with pytest.raises(gpu.DeviceError, match="exactly one"):
        gpu.choose_device({"CUDA_VISIBLE_DEVICES": value}, two_cuda)


def test_several_visible_gpus_without_a_choice_are_refused() -> None:
    with pytest.raises(gpu.DeviceError, match="set it to one device"):
        gpu.choose_device({}, two_cuda)


def test_a_named_device_without_cuda_is_refused() -> None:
    with pytest.raises(gpu.DeviceError, match="no CUDA device"):
        gpu.choose_device({"CUDA_VISIBLE_DEVICES": "0"}, no_cuda)


def test_a_device_named_by_uuid_is_refused_with_a_reason() -> None:
    with pytest.raises(gpu.DeviceError, match="index"):
        gpu.choose_device({"CUDA_VISIBLE_DEVICES": "GPU-8f2a"}, one_cuda)


def test_cpu_workload_sleeps_for_its_duration() -> None:
    outcome = gpu.run(gpu.CPU, 0.05)
    assert outcome.seconds >= 0.05
    assert outcome.tflops is None
    assert not outcome.stopped


def test_cpu_workload_stops_when_asked() -> None:
    outcome = gpu.run(gpu.CPU, 30, should_stop=lambda: True)
    assert outcome.stopped
    assert outcome.seconds < 30


def test_torch_cuda_count_is_zero_without_torch_or_gpu() -> None:
    assert gpu.torch_cuda_count() >= 0


def test_matmul_workload_runs_for_its_duration_and_reports_tflops() -> None:
    """The GPU workload's loop, run on torch's CPU device (skipped where torch is absent)."""
    pytest.importorskip("torch")
    outcome = gpu.matmul("cpu", 64, 0.2, should_stop=lambda: False)
    assert outcome.seconds >= 0.2
    assert outcome.tflops is not None
    assert outcome.tflops > 0
    assert not outcome.stopped


def test_matmul_workload_stops_when_asked() -> None:
    pytest.importorskip("torch")
    outcome = gpu.matmul("cpu", 64, 30, should_stop=lambda: True)
    assert outcome.stopped
    assert outcome.seconds < 30
