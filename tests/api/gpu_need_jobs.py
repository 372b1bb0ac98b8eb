"""Job types that say what they need of their card, and the catalog of the GPU-need API tests
(tests/api/test_gpu_need*.py): a big class and a small one, the small one cheaper."""

from __future__ import annotations

import json

from pydantic import BaseModel

from app.jobs import JobContext, job
from app.settings import Settings

CATALOG: dict[str, object] = {
    "big": {"memory_gb": 80, "price": 2.0},
    "small": {"memory_gb": 16, "price": 1.0},
}
ANY = "test-gpu-any"
BIG_FIRST = "test-gpu-big-first"
MEMORY = "test-gpu-memory"
ELSEWHERE = "test-gpu-elsewhere"
SMALL_ONLY = "test-gpu-small-only"


class Nothing(BaseModel):
    pass


@job(name=ANY, description="Runs on any card.")
def any_card(ctx: JobContext, inp: Nothing) -> Nothing:
    return inp


@job(name=BIG_FIRST, gpu=["big", "small"], description="Prefers the big card.")
def big_first(ctx: JobContext, inp: Nothing) -> Nothing:
    return inp


@job(name=MEMORY, min_gpu_memory_gb=40, description="Needs 40 GB.")
def memory(ctx: JobContext, inp: Nothing) -> Nothing:
    return inp


@job(name=SMALL_ONLY, gpu=["small"], description="Runs on the small card alone.")
def small_only(ctx: JobContext, inp: Nothing) -> Nothing:
    return inp


@job(name=ELSEWHERE, gpu=["a100"], description="Names a class this catalog lacks.")
def elsewhere(ctx: JobContext, inp: Nothing) -> Nothing:
    return inp


def with_catalog(settings: Settings, catalog: dict[str, object] | None = CATALOG) -> Settings:
    """The settings, with these types registered and GPU_CLASSES set (None: unset)."""
    return settings.model_copy(
        update={
            "job_modules": [__name__],
            "gpu_classes": None if catalog is None else json.dumps(catalog),
        }
    )
