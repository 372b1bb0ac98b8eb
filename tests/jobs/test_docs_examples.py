"""The preemptible types docs/jobs.md shows (`long-count`, and `slow-count` of its recipe for
watching a preemption by hand) work as written: put in a module of their own on the import path,
as the docs say, they register as preemptible, and a run asked to yield leaves a checkpoint the
next run resumes from."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from app.jobs import JobPreemptedError
from app.jobs.context import JobContext
from app.jobs.registry import load_registry

DOCS = Path(__file__).resolve().parents[2] / "docs" / "jobs.md"
MODULE = "docs_my_team.jobs"


@pytest.fixture
def documented(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The registry of the docs' module, written where PYTHONPATH would find it."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    wanted = [b for b in blocks if 'name="long-count"' in b or 'name="slow-count"' in b]
    assert len(wanted) == 2
    package = tmp_path / "docs_my_team"
    package.mkdir()
    (package / "jobs.py").write_text("\n\n".join(wanted))
    monkeypatch.syspath_prepend(str(tmp_path))
    return load_registry([MODULE], entry_points=False)


def context(checkpoints: Path, preemptions: int, ask: bool) -> JobContext:
    return JobContext(
        task_id="t",
        gpu_id=None,
        device=None,
        deadline=time.time() + 60,
        checkpoint_dir=checkpoints,
        preemptions=preemptions,
        _yield=lambda: ask,
    )


def test_the_documented_types_are_preemptible(documented: Any) -> None:
    for name in ("long-count", "slow-count"):
        job_type = documented.get(name)
        assert job_type is not None, name
        assert (job_type.queue, job_type.preemptible) == ("long", True)


def test_a_slow_count_run_asked_to_yield_resumes_from_its_checkpoint(
    documented: Any, tmp_path: Path
) -> None:
    slow = documented.get("slow-count")
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "state.json").write_text('{"step": 2, "total": 1}')  # a first run's steps
    with pytest.raises(JobPreemptedError):
        slow.target(context(checkpoints, 0, ask=True), slow.input_model(steps=3))
    resumed = slow.target(context(checkpoints, 1, ask=False), slow.input_model(steps=3))
    assert resumed.model_dump() == {"total": 3, "resumed_at": 2, "preemptions": 1}
