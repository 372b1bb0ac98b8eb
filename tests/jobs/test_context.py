"""JobContext's reports: ctx.log, ctx.progress (checked), and ctx.output_dir."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from app.jobs import JobContext, JobPreemptedError
from app.jobs.context import MAX_PROGRESS_MESSAGE


def context(tmp_path: Path, said: list[object]) -> JobContext:
    return JobContext(
        "t1",
        None,
        None,
        time.time() + 10,
        output_dir=tmp_path,
        _log=said.append,
        _progress=lambda fraction, message: said.append((fraction, message)),
    )


def test_log_and_progress_reach_the_executor(tmp_path: Path) -> None:
    said: list[object] = []
    ctx = context(tmp_path, said)
    ctx.log("hello")
    ctx.progress(0.25, "a quarter")
    ctx.progress(1, "x" * 500)
    assert said == [("hello"), (0.25, "a quarter"), (1.0, "x" * MAX_PROGRESS_MESSAGE)]
    assert ctx.output_dir == tmp_path


@pytest.mark.parametrize("fraction", [-0.01, 1.01, math.nan, math.inf, -math.inf])
def test_progress_outside_0_to_1_is_a_value_error(tmp_path: Path, fraction: float) -> None:
    said: list[object] = []
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        context(tmp_path, said).progress(fraction)
    assert said == []


def test_a_context_built_by_hand_has_an_empty_folder_and_ignores_reports() -> None:
    ctx = JobContext("t1", None, None, time.time() + 10)
    try:
        assert ctx.output_dir.is_dir()
        assert list(ctx.output_dir.iterdir()) == []
        ctx.log("nobody listens")
        ctx.progress(0.5)
    finally:
        ctx.output_dir.rmdir()


def test_a_context_built_by_hand_has_its_own_checkpoint_folder_and_no_preemptions() -> None:
    ctx = JobContext("t1", None, None, time.time() + 10)
    assert ctx.checkpoint_dir.is_dir()
    assert ctx.checkpoint_dir != ctx.output_dir
    assert list(ctx.checkpoint_dir.iterdir()) == []
    assert ctx.preemptions == 0
    assert ctx.preempted is False
    ctx.check_preempted()  # nobody asked: nothing raised


def test_check_preempted_raises_once_the_run_is_asked_to_yield(tmp_path: Path) -> None:
    asked = False
    ctx = JobContext(
        "t1",
        None,
        None,
        time.time() + 10,
        checkpoint_dir=tmp_path,
        preemptions=2,
        _yield=lambda: asked,
    )
    ctx.check_preempted()
    asked = True
    assert ctx.preempted is True
    with pytest.raises(JobPreemptedError, match="t1"):
        ctx.check_preempted()
    assert (ctx.checkpoint_dir, ctx.preemptions) == (tmp_path, 2)
    assert not ctx.cancelled  # an ask to yield is not a cancel
