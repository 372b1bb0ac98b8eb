"""A pretend GPU for the tests of the child's hygiene, with no GPU at hand: job types that break
it, leak on it, hold it from setup() or run out of its memory, and the device probe that
reports what they did (JOB_MODULES=tests.jobs.device, DEVICE_PROBE=tests.jobs.device:probe).

The pretend device lives in this module's globals, in the child, as a real one lives in the
child's CUDA context: a fresh child starts with a working device that holds nothing. A
device broken "for good" is a marker file, which a fresh child's probe sees too.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel

from app.jobs import JobContext, job

MB = 1024 * 1024
#: Where a device broken for good leaves its mark (the e2e tests set it for the worker).
MARKER_ENV = "FAIRGPU_TEST_DEVICE_MARKER"

#: What the jobs keep on the pretend device (a module global, like a real leak), the sticky
#: error a job left, and the peak since the last reset.
held: list[bytes] = []
sticky: str | None = None
peak_bytes = 0


class FakeOutOfMemoryError(RuntimeError):
    """What the pretend device raises when a job asks for too much."""


class FakeProbe:
    """The probe of the pretend device (see app/worker/probe.py)."""

    def __init__(self, marker: str | None = None) -> None:
        self.marker = marker

    def check(self, *, init: bool) -> str | None:
        if init and self.marker and Path(self.marker).exists():
            return Path(self.marker).read_text()
        return sticky

    def reset_peak(self) -> None:
        global peak_bytes
        peak_bytes = self.holding()

    def peak(self) -> int | None:
        return max(peak_bytes, self.holding())

    def release(self) -> int | None:
        return self.holding()

    def out_of_memory(self, exc: BaseException) -> bool:
        return isinstance(exc, FakeOutOfMemoryError)

    @staticmethod
    def holding() -> int:
        return sum(len(block) for block in held)


def probe(gpu_id: int | None) -> FakeProbe:
    """DEVICE_PROBE's factory: the marker file comes from the environment."""
    return FakeProbe(os.environ.get(MARKER_ENV))


class Nothing(BaseModel):
    pass


class Assert(BaseModel):
    for_good: bool = False
    marker: str = ""  # where to leave the mark (the environment's, when empty)


@job(name="device-assert", description="Leaves the pretend device broken, as a CUDA assert does.")
def device_assert(ctx: JobContext, inp: Assert) -> Nothing:
    global sticky
    sticky = "CUDA error: device-side assert triggered"
    if inp.for_good:
        marker = inp.marker or os.environ[MARKER_ENV]
        Path(marker).write_text("CUDA error: the device fell off the bus")
    raise RuntimeError(sticky)


@job(name="device-unplug", description="Ends well, and the card is gone for the next child.")
def device_unplug(ctx: JobContext, inp: Nothing) -> Nothing:
    Path(os.environ[MARKER_ENV]).write_text("CUDA error: the card is gone")
    return Nothing()


class Megabytes(BaseModel):
    mb: int


class Memory(BaseModel):
    held: int
    pid: int
    rss_mb: float


def _rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / MB


@job(name="device-leak", description="Keeps mb of pretend GPU memory in a module global.")
def device_leak(ctx: JobContext, inp: Megabytes) -> Memory:
    held.append(bytes(inp.mb * MB))
    return Memory(held=FakeProbe.holding(), pid=os.getpid(), rss_mb=_rss_mb())


@job(name="device-memory", description="Says what the pretend device holds, and the child's pid.")
def device_memory(ctx: JobContext, inp: Nothing) -> Memory:
    return Memory(held=FakeProbe.holding(), pid=os.getpid(), rss_mb=_rss_mb())


@job(name="device-oom", description="Asks the pretend device for too much memory.")
def device_oom(ctx: JobContext, inp: Megabytes) -> Nothing:
    global peak_bytes
    peak_bytes = FakeProbe.holding() + inp.mb * MB  # what it had taken before the last ask
    raise FakeOutOfMemoryError(f"tried to allocate {inp.mb} MiB more than the device has")


@job(name="device-model", description="Holds 300 MB of pretend GPU memory from its setup().")
class DeviceModel:
    def setup(self, ctx: JobContext) -> None:
        self.weights = bytes(300 * MB)
        held.append(self.weights)

    def run(self, ctx: JobContext, inp: Nothing) -> Memory:
        return Memory(held=FakeProbe.holding(), pid=os.getpid(), rss_mb=_rss_mb())


_heap: list[bytes] = []


@job(name="heap-grow", description="Keeps mb of real memory in a module global.")
def heap_grow(ctx: JobContext, inp: Megabytes) -> Memory:
    _heap.append(b"x" * (inp.mb * MB))  # written, so resident: bytes(n) could stay unmapped
    return Memory(held=FakeProbe.holding(), pid=os.getpid(), rss_mb=_rss_mb())


class Seconds(BaseModel):
    seconds: float


@job(name="slow-setup", description="A setup() that takes its time; the job itself is instant.")
class SlowSetup:
    def setup(self, ctx: JobContext) -> None:
        time.sleep(self.seconds())  # the setup's work is to take its time

    def run(self, ctx: JobContext, inp: Seconds) -> Nothing:
        return Nothing()

    @staticmethod
    def seconds() -> float:
        return float(os.environ.get("FAIRGPU_TEST_SETUP_S", "1"))


@job(name="broken-setup", description="A setup() that always raises.")
class BrokenSetup:
    def setup(self, ctx: JobContext) -> None:
        raise OSError("the model's weights are not where setup() looks")

    def run(self, ctx: JobContext, inp: Nothing) -> Nothing:
        return Nothing()
