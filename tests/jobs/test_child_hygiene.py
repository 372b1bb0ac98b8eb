"""A clean child for every job: real spawned children, replaced when a job leaves them with a
broken device, leaked memory or too big a heap, or when the limits on jobs say so. The CUDA-only
decisions run against the pretend device of tests.jobs.device, through the child's probe."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.worker.calls import Call, DeviceBrokenError, Ended
from app.worker.child import JobChild
from app.worker.hygiene import ChildLimits
from tests.jobs.device import MB, FakeProbe

pytestmark = pytest.mark.integration

MODULES = ["tests.jobs.sample", "tests.jobs.device"]
GRACE_S = 0.5


def never() -> bool:
    return False


class Child:
    """A JobChild with the pretend device, and the replacements it reported."""

    def __init__(self, limits: ChildLimits, marker: Path, **options: float) -> None:
        self.replaced: list[str] = []
        graces = {"timeout_grace_s": GRACE_S, "cancel_grace_s": GRACE_S, "kill_grace_s": GRACE_S}
        self.child = JobChild(
            MODULES, None, limits=limits, probe=FakeProbe(str(marker)), **{**graces, **options}
        )
        self.child.on_replace = self.replaced.append
        self.child.start()

    def run(self, type_: str, inp: dict[str, Any] | None = None, budget_s: float = 10) -> Ended:
        return self.child.run(Call("t1", type_, json.dumps(inp or {}), budget_s, None), never)

    def memory(self) -> dict[str, Any]:
        """What the pretend device holds, and the pid of the child that ran the job."""
        ended = self.run("device-memory")
        assert ended.end == "success", ended.error
        out: dict[str, Any] = json.loads(ended.output or "")
        return out


@pytest.fixture
def make_child(tmp_path: Path) -> Iterator[Callable[..., Child]]:
    made: list[Child] = []

    def make(limits: ChildLimits | None = None, **options: float) -> Child:
        child = Child(limits or ChildLimits(), tmp_path / "broken-for-good", **options)
        made.append(child)
        return child

    yield make
    for child in made:
        child.child.close()


def test_a_sticky_device_error_costs_the_child_and_the_next_job_runs_on_a_clean_one(
    make_child: Callable[..., Child],
) -> None:
    child = make_child()
    before = child.memory()["pid"]
    broke = child.run("device-assert")
    assert broke.end == "exception"  # the job that broke the device keeps its own error
    assert "device-side assert triggered" in (broke.error or "")
    assert child.replaced == ["cuda_error"]
    after = child.run("echo", {"text": "next"})
    assert after.end == "success", after.error  # no later job sees the broken device
    assert child.memory()["pid"] != before


def test_a_device_that_a_fresh_child_finds_broken_is_broken_for_good(
    make_child: Callable[..., Child], tmp_path: Path
) -> None:
    child = make_child()
    marker = str(tmp_path / "broken-for-good")
    assert child.run("device-assert", {"for_good": True, "marker": marker}).end == "exception"
    assert child.replaced == ["cuda_error"]
    # known before the worker takes another job: the replacement's probe was awaited
    assert "the device fell off the bus" in (child.child.broken() or "")
    with pytest.raises(DeviceBrokenError, match="the device fell off the bus"):
        child.run("echo", {"text": "never runs"})


def test_a_fresh_child_that_fails_its_probe_at_the_next_job_raises_before_the_job(
    make_child: Callable[..., Child], tmp_path: Path
) -> None:
    child = make_child(ChildLimits(max_jobs=1))
    (tmp_path / "broken-for-good").write_text("the card is gone")  # from outside, meanwhile
    assert child.run("echo", {"text": "last"}).end == "success"
    assert child.replaced == ["max_jobs"]
    assert child.child.broken() is None  # a replacement for max_jobs is not awaited
    with pytest.raises(DeviceBrokenError, match="the card is gone"):
        child.run("echo", {"text": "never runs"})


def test_gpu_memory_a_job_leaves_past_the_limit_costs_the_child(
    make_child: Callable[..., Child],
) -> None:
    child = make_child(ChildLimits(max_gpu_leak_mb=256))
    first = child.memory()["pid"]
    kept = child.run("device-leak", {"mb": 200})  # under the limit: the child stays
    assert kept.end == "success", kept.error
    assert child.replaced == []
    seen = child.memory()
    assert (seen["held"], seen["pid"]) == (200 * MB, first)
    leaked = child.run("device-leak", {"mb": 100})  # 300 MB held now: over
    assert leaked.end == "success"  # the job itself succeeded
    assert child.replaced == ["gpu_leak"]
    fresh = child.memory()
    assert (fresh["held"], fresh["pid"] != first) == (0, True)


def test_what_setup_holds_is_the_baseline_not_a_leak(make_child: Callable[..., Child]) -> None:
    child = make_child(ChildLimits(max_gpu_leak_mb=256))
    for _ in range(3):
        ended = child.run("device-model")  # its setup() holds 300 MB, more than the limit
        assert ended.end == "success", ended.error
    assert child.replaced == []


def test_out_of_memory_is_its_own_end_and_the_child_stays_when_nothing_is_held(
    make_child: Callable[..., Child],
) -> None:
    child = make_child()
    pid = child.memory()["pid"]
    ended = child.run("device-oom", {"mb": 150_000})
    assert ended.end == "oom"
    assert ended.peak_gpu_memory_bytes == 150_000 * MB
    assert child.replaced == []
    assert child.memory()["pid"] == pid


def test_a_child_whose_heap_passes_child_max_rss_mb_is_replaced(
    make_child: Callable[..., Child],
) -> None:
    child = make_child(ChildLimits(max_rss_mb=400))
    small = child.memory()
    assert small["rss_mb"] < 400  # the limit is above what a fresh child holds
    grown = child.run("heap-grow", {"mb": 450})
    assert grown.end == "success", grown.error
    assert child.replaced == ["rss"]
    assert child.memory()["pid"] != small["pid"]


def test_child_max_jobs_gives_a_fresh_child_after_that_many_jobs(
    make_child: Callable[..., Child],
) -> None:
    child = make_child(ChildLimits(max_jobs=2))
    pids = [child.memory()["pid"] for _ in range(5)]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
    assert child.replaced == ["max_jobs", "max_jobs"]


def test_child_per_job_runs_every_job_in_a_fresh_child(
    make_child: Callable[..., Child],
) -> None:
    child = make_child(ChildLimits(per_job=True))
    setups = [json.loads(child.run("counted").output or "") for _ in range(3)]
    assert len({seen["pid"] for seen in setups}) == 3
    assert [seen["setups"] for seen in setups] == [1, 1, 1]  # nothing carried over
    assert child.replaced == ["per_job"] * 3


def test_the_kills_are_replacements_with_their_reasons(
    make_child: Callable[..., Child],
) -> None:
    child = make_child()
    assert child.run("crash", {"how": "exit"}).end == "crashed"
    assert child.run("sleepy", {"seconds": 30}, budget_s=GRACE_S).end == "timeout"
    assert child.replaced == ["crash", "timeout"]


def test_setup_runs_before_the_clock_starts(
    make_child: Callable[..., Child], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIRGPU_TEST_SETUP_S", "1.5")  # the child inherits it
    child = make_child()
    ended = child.run("slow-setup", {"seconds": 0}, budget_s=1)  # setup longer than the budget
    assert ended.end == "success", ended.error
    assert ended.seconds < 1  # its setup's 1.5 s are not the job's


def test_a_setup_that_fails_ends_the_job_setup_and_keeps_the_child(
    make_child: Callable[..., Child],
) -> None:
    child = make_child()
    pid = child.memory()["pid"]
    ended = child.run("broken-setup")
    assert ended.end == "setup"
    assert "setup() of 'broken-setup' failed: OSError" in (ended.error or "")
    assert ended.seconds == 0
    assert child.replaced == []
    assert child.memory()["pid"] == pid


def test_a_setup_past_setup_timeout_s_is_killed_and_ends_setup(
    make_child: Callable[..., Child], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIRGPU_TEST_SETUP_S", "60")
    child = make_child(setup_timeout_s=0.5)
    ended = child.run("slow-setup", {"seconds": 0})
    assert ended.end == "setup"
    assert "setup() did not finish within 0.5 s" in (ended.error or "")
    assert child.replaced == ["timeout"]
    assert child.run("echo", {"text": "next"}).end == "success"
