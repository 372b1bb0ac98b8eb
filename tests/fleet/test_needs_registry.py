"""A job type's need of its card, as @job takes it: checked for its form when it is
registered (the catalog checks the names at submit)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from app.jobs import JobContext, JobType, RegistryError, job


class In(BaseModel):
    pass


def run(ctx: JobContext, inp: In) -> In:
    return inp


def test_a_type_keeps_its_classes_in_order_and_its_memory() -> None:
    typed = job(name="needs", gpu=["big", "small"], min_gpu_memory_gb=40)(run)
    assert (typed.gpu, typed.min_gpu_memory_gb) == (("big", "small"), 40.0)


def test_a_type_that_says_nothing_runs_anywhere() -> None:
    typed = job(name="any")(run)
    assert (typed.gpu, typed.min_gpu_memory_gb) == (None, None)


@pytest.mark.parametrize(
    "gpu", [[], "big", ["big", "big"], ["Big"], [""], [1], {"big": 1}], ids=repr
)
def test_a_malformed_class_list_is_refused(gpu: object) -> None:
    with pytest.raises(RegistryError, match=r"job type 'bad': gpu"):
        job(name="bad", gpu=gpu)(run)  # type: ignore[arg-type]


@pytest.mark.parametrize("memory", [0, -1, math.nan, math.inf, True, "40"], ids=repr)
def test_a_memory_that_is_not_a_positive_number_is_refused(memory: object) -> None:
    with pytest.raises(RegistryError, match=r"job type 'bad': min_gpu_memory_gb"):
        job(name="bad", min_gpu_memory_gb=memory)(run)  # type: ignore[arg-type]


def test_the_documented_type_registers_with_its_need() -> None:
    """docs/jobs.md's example ("What a job needs of its card") is a type as written."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "jobs.md"
    [block] = [
        b
        for b in re.findall(r"```python\n(.*?)```", docs.read_text(), re.S)
        if 'name="finetune"' in b
    ]
    scope: dict[str, object] = {"__name__": "docs_finetune"}
    exec(compile(block, "docs/jobs.md", "exec"), scope)
    typed = scope["finetune"]
    assert isinstance(typed, JobType)
    assert (typed.gpu, typed.min_gpu_memory_gb, typed.queue) == (("big", "small"), 40.0, "long")
