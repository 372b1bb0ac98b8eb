"""The device probes (app/worker/probe.py): which one a worker gets, and CUDA's, where torch is
installed but no job has touched CUDA (the case that once crashed a fresh child)."""

from __future__ import annotations

import pytest

from app.worker.probe import CudaProbe, NoDeviceProbe, probe_for
from tests.jobs.device import FakeProbe


def test_a_cpu_worker_gets_no_device_and_a_gpu_worker_cuda() -> None:
    assert isinstance(probe_for(None), NoDeviceProbe)
    assert isinstance(probe_for(0), CudaProbe)


def test_device_probe_names_a_factory_that_gets_the_gpu_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAIRGPU_TEST_DEVICE_MARKER", "/nowhere")
    made = probe_for(3, "tests.jobs.device:probe")
    assert isinstance(made, FakeProbe)
    assert made.marker == "/nowhere"


def test_no_device_is_always_usable_and_holds_nothing() -> None:
    probe = NoDeviceProbe()
    assert probe.check(init=True) is None
    probe.reset_peak()
    assert (probe.peak(), probe.release()) == (None, None)
    assert probe.out_of_memory(MemoryError()) is False


def test_cuda_probe_leaves_an_uninitialised_cuda_alone() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: scripts/gpu_check.py checks the probe on it")
    probe = CudaProbe()
    probe.reset_peak()  # once raised "Invalid device argument" before CUDA was initialised
    assert probe.check(init=False) is None
    assert (probe.peak(), probe.release()) == (None, None)
    assert not torch.cuda.is_initialized()
    assert probe.check(init=True) is not None  # asked to initialise: no device here says so


def test_cuda_probe_knows_torchs_out_of_memory_error() -> None:
    torch = pytest.importorskip("torch")
    assert CudaProbe().out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert not CudaProbe().out_of_memory(RuntimeError("CUDA error: device-side assert"))
