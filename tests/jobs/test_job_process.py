"""Jobs, in this process: how a job's end is read and what the child reports after it, without a
child to spawn (the pretend device of tests.jobs.device stands in for a GPU)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from app.jobs import JobContext, JobPreemptedError, Registry, job, load_registry
from app.worker.calls import After, Call, Reply
from app.worker.job_process import Jobs, checkpoint_dir
from tests.jobs import device
from tests.jobs.device import MB, FakeProbe
from tests.jobs.sample import EchoOut, Nothing


@job(name="as-dict", description="Returns a dict that the output model validates.")
def as_dict(ctx: JobContext, inp: Nothing) -> EchoOut:
    out: Any = {"upper": "FROM A DICT"}
    return out  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def registry() -> Registry:
    registry = load_registry(["tests.jobs.sample", "tests.jobs.device"], entry_points=False)
    registry.add(as_dict)
    return registry


@pytest.fixture(autouse=True)
def fresh_device() -> None:
    """Each test starts with a working pretend device that holds nothing."""
    device.held.clear()
    device.sticky = None
    device.peak_bytes = 0


def run(
    registry: Registry,
    type_: str,
    inp: dict[str, Any] | None = None,
    stop: bool = False,
    jobs: Jobs | None = None,
    began: list[str] | None = None,
    asked: bool = False,
) -> Reply:
    call = Call("t1", type_, json.dumps(inp or {}), 10, None)
    ctx = JobContext("t1", None, None, time.time() + 10, _stop=lambda: stop, _yield=lambda: asked)
    marks = [] if began is None else began
    return (jobs or Jobs(registry)).run(call, ctx, lambda: marks.append(type_))


def test_success_carries_the_output_as_json(registry: Registry) -> None:
    reply = run(registry, "echo", {"text": "hi"})
    assert (reply.end, reply.output, reply.error) == ("success", '{"upper":"HI"}', None)
    assert reply.peak_rss_bytes is not None and reply.peak_rss_bytes > 0
    assert reply.seconds is not None and reply.seconds < 1.5
    ended = reply.ended(1.5)  # the worker saw 1.5 s (it was paused): the job's own time counts
    assert (ended.end, ended.seconds, ended.output) == ("success", reply.seconds, reply.output)
    assert reply.ended(0.0).seconds == reply.seconds  # nor does a late look at the pipe shorten it
    assert Reply("crashed").ended(1.5).seconds == 1.5  # no time of its own: the worker's


def test_the_user_sees_the_jobs_own_frames_and_the_log_the_whole_traceback(
    registry: Registry,
) -> None:
    reply = run(registry, "fail")
    assert reply.end == "exception"
    error = reply.error or ""
    assert error.splitlines()[:2] == [
        "ValueError: the job failed on purpose",
        "in the job's code:",
    ]
    assert 'File "tests/jobs/sample.py", line ' in error
    assert "raise ValueError" in error
    assert "job_process.py" not in error  # none of fairgpu's frames
    assert str(Path(__file__).parents[2]) not in error  # nor this server's paths
    trace = reply.trace or ""
    assert trace.startswith("Traceback (most recent call last):")
    assert "job_process.py" in trace and "sample.py" in trace


def test_an_output_the_model_validates_from_is_accepted(registry: Registry) -> None:
    assert run(registry, "as-dict").output == '{"upper":"FROM A DICT"}'


def test_a_job_that_ends_after_its_cancel_is_cancelled(registry: Registry) -> None:
    reply = run(registry, "echo", {"text": "hi"}, stop=True)
    assert (reply.end, reply.output) == ("cancelled", None)


def test_a_job_that_raises_its_cancel_is_cancelled(registry: Registry) -> None:
    assert run(registry, "polite", {"seconds": 5}, stop=True).end == "cancelled"


def test_a_failed_setup_ends_setup_never_begins_and_is_tried_again(registry: Registry) -> None:
    jobs, began = Jobs(registry), list[str]()
    first = run(registry, "shaky", jobs=jobs, began=began)
    assert first.end == "setup"
    assert "setup() of 'shaky' failed: RuntimeError: shaky: the first setup fails" in (
        first.error or ""
    )
    assert began == []  # the job's clock never started
    assert "shaky" not in jobs.runnables
    assert run(registry, "shaky", jobs=jobs, began=began).end == "success"
    assert began == ["shaky"]
    assert "shaky" in jobs.runnables


def test_the_job_begins_after_its_setup_and_its_deadline_counts_from_there(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIRGPU_TEST_SETUP_S", "0.3")
    jobs, marks = Jobs(registry), list[float]()
    call = Call("t1", "slow-setup", json.dumps({"seconds": 0}), 10, None)
    ctx = JobContext("t1", None, None, time.time() + 10)
    called = time.monotonic()
    reply = jobs.run(call, ctx, lambda: marks.append(time.monotonic()))
    assert reply.end == "success", reply.error
    assert marks and marks[0] - called >= 0.3  # began() came once setup() was done


def test_an_exception_the_probe_calls_out_of_memory_ends_oom_with_its_peak(
    registry: Registry,
) -> None:
    jobs = Jobs(registry, FakeProbe())
    reply = run(registry, "device-oom", {"mb": 700}, jobs=jobs)
    assert reply.end == "oom"
    assert "FakeOutOfMemoryError: tried to allocate 700 MiB" in (reply.error or "")
    assert reply.peak_gpu_memory_bytes == 700 * MB


def test_without_a_probe_nothing_is_out_of_memory(registry: Registry) -> None:
    assert run(registry, "device-oom", {"mb": 700}).end == "exception"


def test_after_a_job_the_state_says_what_is_held_against_the_post_setup_baseline(
    registry: Registry,
) -> None:
    jobs = Jobs(registry, FakeProbe())
    assert run(registry, "device-model", jobs=jobs).end == "success"
    assert jobs.after() == After(None, 300 * MB, 300 * MB, jobs.after().rss_bytes)
    assert run(registry, "device-leak", {"mb": 20}, jobs=jobs).end == "success"
    after = jobs.after()
    assert (after.gpu_held, after.gpu_baseline) == (320 * MB, 300 * MB)
    assert after.rss_bytes is not None and after.rss_bytes > 0  # this process's, from /proc


def test_a_sticky_error_is_reported_after_the_job_that_left_it(registry: Registry) -> None:
    jobs = Jobs(registry, FakeProbe())
    reply = run(registry, "device-assert", jobs=jobs)
    assert reply.end == "exception"  # the job that broke the device keeps its own error
    assert "device-side assert triggered" in (reply.error or "")
    after = jobs.after()
    assert after.problem == "CUDA error: device-side assert triggered"
    assert after.gpu_held is None


class Untouched(FakeProbe):
    """A probe of a device no job has used: asking it to initialise is a failure."""

    def check(self, *, init: bool) -> str | None:
        assert not init, "the check after a job initialised the device"
        return None


def test_the_check_after_a_job_never_initialises_the_device(registry: Registry) -> None:
    jobs = Jobs(registry, Untouched())
    assert run(registry, "echo", {"text": "cpu only"}, jobs=jobs).end == "success"
    assert jobs.after().problem is None


class Falling(FakeProbe):
    """A probe whose device cannot even say what it holds."""

    def release(self) -> int | None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")


def test_a_device_that_fails_to_report_is_a_problem(registry: Registry) -> None:
    jobs = Jobs(registry, Falling())
    assert run(registry, "echo", {"text": "x"}, jobs=jobs).end == "success"
    assert jobs.after().problem == (
        "RuntimeError: CUDA error: an illegal memory access was encountered"
    )


@pytest.mark.parametrize(
    ("type_", "inp", "says"),
    [
        ("fail", {}, "ValueError: the job failed on purpose"),
        ("huge", {}, "over the limit of 65536 bytes"),
        ("echo", {"text": 3}, "validation error"),
        ("nope", {}, "unknown job type 'nope'"),
        ("needs-extra", {}, "needs fairgpu_no_such_package"),
    ],
)
def test_a_job_that_cannot_end_well_is_an_exception(
    registry: Registry, type_: str, inp: dict[str, Any], says: str
) -> None:
    reply = run(registry, type_, inp)
    assert (reply.end, reply.output) == ("exception", None)
    assert says in (reply.error or "")


def test_a_job_that_raises_the_ask_to_yield_ends_preempted(registry: Registry) -> None:
    reply = run(registry, "checkpointed", asked=True)
    assert (reply.end, reply.output) == ("preempted", None)
    assert reply.error == "job t1 was asked to yield its GPU"
    assert reply.trace is None  # not a failure: nothing for the worker's log
    assert reply.seconds is not None


def test_a_job_that_returns_after_the_ask_succeeds(registry: Registry) -> None:
    reply = run(registry, "finisher", {"seconds": 5}, asked=True)
    assert reply.end == "success", reply.error


def test_a_cancel_counts_over_the_ask(registry: Registry) -> None:
    assert run(registry, "checkpointed", stop=True, asked=True).end == "cancelled"


@job(name="self-preempting", description="Raises JobPreemptedError unasked.")
def self_preempting(ctx: JobContext, inp: Nothing) -> Nothing:
    raise JobPreemptedError("nobody asked")


def test_the_error_raised_unasked_is_an_exception(registry: Registry) -> None:
    jobs = Jobs(Registry([self_preempting]))
    reply = run(registry, "self-preempting", jobs=jobs)
    assert reply.end == "exception"
    assert "JobPreemptedError: nobody asked" in (reply.error or "")


def test_the_checkpoint_folder_is_the_calls_or_a_fresh_one(tmp_path: Path) -> None:
    named = Call("t1", "echo", "{}", 10, None, checkpoint_dir=str(tmp_path))
    assert checkpoint_dir(named) == tmp_path
    scratch = checkpoint_dir(Call("t1", "echo", "{}", 10, None))
    assert scratch.is_dir() and scratch != tmp_path
    assert list(scratch.iterdir()) == []
