"""InlineExecutor's preemption: the flag semantics of the warm child's, without its kill."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from app.jobs import load_registry
from app.worker.calls import Call, never
from app.worker.inline import InlineExecutor
from tests.jobs.sample import STEP_FILE


@pytest.fixture(scope="module")
def executor() -> InlineExecutor:
    return InlineExecutor(load_registry(["tests.jobs.sample"], entry_points=False))


class Asks:
    """A should_yield that turns true on its from_call-th call, and counts its calls."""

    def __init__(self, from_call: int) -> None:
        self.from_call, self.calls = from_call, 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.from_call


def steps(count: int, *, preemptible: bool, folder: Path | None = None) -> Call:
    inp = json.dumps({"steps": count})
    where = "" if folder is None else str(folder)
    return Call("t1", "checkpointed", inp, 10, None, preemptible=preemptible, checkpoint_dir=where)


def test_a_preemptible_call_yields_when_asked_and_leaves_its_checkpoint(
    executor: InlineExecutor, tmp_path: Path
) -> None:
    call = steps(1000, preemptible=True, folder=tmp_path)
    ended = executor.run(call, never, should_yield=Asks(3))
    assert ended.end == "preempted"
    assert json.loads((tmp_path / STEP_FILE).read_text()) == {"next": 2}


def test_a_call_that_is_not_preemptible_is_never_asked(executor: InlineExecutor) -> None:
    asked = Asks(1)
    ended = executor.run(steps(3, preemptible=False), never, should_yield=asked)
    assert ended.end == "success", ended.error
    assert asked.calls == 0


def test_once_asked_the_run_stays_asked(executor: InlineExecutor) -> None:
    # the source says yes once; the run's end, read after the job raised, still sees the ask
    answers = iter([False, True])
    should_yield: Callable[[], bool] = lambda: next(answers, False)  # noqa: E731
    ended = executor.run(steps(1000, preemptible=True), never, should_yield=should_yield)
    assert ended.end == "preempted"


def test_a_cancel_counts_over_the_ask(executor: InlineExecutor) -> None:
    ended = executor.run(steps(1000, preemptible=True), Asks(1), should_yield=Asks(1))
    assert ended.end == "cancelled"
