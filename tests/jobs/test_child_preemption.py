"""Preemption in the warm child: a preemptible job's run asked to yield its GPU ends `preempted`,
by itself or stopped after PREEMPT_GRACE_S, and leaves its checkpoint; no other run is asked."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.models import ChildReplacement
from app.worker.calls import Call
from app.worker.child import JobChild
from tests.jobs.sample import STEP_FILE
from tests.jobs.test_child import GRACE_S, MODULES, after_polls, call, never

pytestmark = pytest.mark.integration


class Recorded:
    """A should_yield that says `answer` and counts its calls."""

    def __init__(self, answer: bool) -> None:
        self.answer, self.calls = answer, 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.answer


def preemptible(call_: Call, folder: Path, preemptions: int = 0) -> Call:
    return replace(call_, preemptible=True, checkpoint_dir=str(folder), preemptions=preemptions)


@pytest.fixture
def make_child() -> Iterator[Callable[..., JobChild]]:
    children: list[JobChild] = []

    def make(preempt_grace_s: float, cancel_grace_s: float = GRACE_S) -> JobChild:
        child = JobChild(
            MODULES,
            None,
            timeout_grace_s=GRACE_S,
            cancel_grace_s=cancel_grace_s,
            kill_grace_s=GRACE_S,
            preempt_grace_s=preempt_grace_s,
        )
        children.append(child)
        child.start()
        return child

    yield make
    for child in children:
        child.close()


def checkpoint(folder: Path) -> int:
    next_step: int = json.loads((folder / STEP_FILE).read_text())["next"]
    return next_step


def test_a_job_that_checks_the_ask_yields_and_resumes_from_its_checkpoint(
    make_child: Callable[..., JobChild], tmp_path: Path
) -> None:
    # a minute's grace: a kill would time the test out, so a preempted end is the job's own
    child = make_child(60)
    pid = child.pid
    ended = child.run(
        preemptible(call("checkpointed"), tmp_path), never, should_yield=after_polls(5)
    )
    assert ended.end == "preempted"
    assert "stopped" not in (ended.error or "")
    assert ended.output is None
    assert child.pid == pid  # it yielded: no child was replaced
    saved = checkpoint(tmp_path)
    assert 0 < saved < 1000

    resumed = child.run(
        preemptible(call("checkpointed", {"steps": saved + 2}), tmp_path, preemptions=1), never
    )
    assert resumed.end == "success", resumed.error
    out = json.loads(resumed.output or "")
    assert out == {"done": saved + 2, "resumed_at": saved, "preemptions": 1}


def test_a_job_that_ignores_the_ask_is_stopped_after_the_grace_and_its_child_replaced(
    make_child: Callable[..., JobChild], tmp_path: Path
) -> None:
    child = make_child(0.3)
    replaced: list[ChildReplacement] = []
    child.on_replace = replaced.append
    pid = child.pid
    stubborn = preemptible(call("stubborn", {"seconds": 30}), tmp_path)
    ended = child.run(stubborn, never, should_yield=after_polls(3))
    assert ended.end == "preempted"
    assert ended.error == "the job did not yield within 0.3 s of the ask: stopped"
    assert ended.seconds > 0
    assert replaced == ["preempt"]
    assert child.pid not in (None, pid)
    assert (tmp_path / "started").exists()  # what it left is the next run's
    assert child.run(call("echo", {"text": "next"}), never).end == "success"


def test_a_call_that_is_not_preemptible_is_never_asked(
    make_child: Callable[..., JobChild], tmp_path: Path
) -> None:
    child = make_child(GRACE_S)
    asked = Recorded(True)
    # a preemptible type, but the worker did not call it preemptible (only the call counts)
    ended = child.run(call("checkpointed", {"steps": 5}), never, should_yield=asked)
    assert ended.end == "success", ended.error
    assert asked.calls == 0


def test_a_job_that_returns_after_the_ask_succeeds(
    make_child: Callable[..., JobChild], tmp_path: Path
) -> None:
    child = make_child(60)
    asked = Recorded(True)
    ended = child.run(
        preemptible(call("finisher", {"seconds": 30}), tmp_path), never, should_yield=asked
    )
    assert ended.end == "success", ended.error
    assert json.loads(ended.output or "") == {"ran": 30}
    assert asked.calls == 1  # once asked, it is not asked again


def test_a_cancel_wins_over_the_ask(make_child: Callable[..., JobChild], tmp_path: Path) -> None:
    # asked to yield, then cancelled: the cancel's grace, not the minute's, decides the kill
    child = make_child(60)
    stubborn = preemptible(call("stubborn", {"seconds": 30}), tmp_path)
    ended = child.run(stubborn, after_polls(6), should_yield=after_polls(3))
    assert ended.end == "cancelled"
    assert "cancel" in (ended.error or "")


def test_a_cancel_during_the_yields_grace_does_not_put_off_its_stop(
    make_child: Callable[..., JobChild], tmp_path: Path
) -> None:
    # asked to yield, then cancelled within the yield's grace: the cancel's end, but the
    # yield's (earlier) deadline, not the cancel's minute
    child = make_child(2.0, cancel_grace_s=60)
    stubborn = preemptible(call("stubborn", {"seconds": 30}), tmp_path)
    ended = child.run(stubborn, after_polls(6), should_yield=after_polls(3))
    assert ended.end == "cancelled"
    assert ended.error == "the job did not yield within 2 s of the ask: stopped"
