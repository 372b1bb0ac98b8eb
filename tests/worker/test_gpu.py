"""The worker's device choice (the burn workload's tests are in tests/jobs/test_burn.py)."""

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


def test_torch_cuda_count_is_zero_without_torch_or_gpu() -> None:
    assert gpu.torch_cuda_count() >= 0
