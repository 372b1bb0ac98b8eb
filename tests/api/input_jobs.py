"""Job types of the input-validation tests, put on JOB_MODULES by `api_with`: one whose models are
written as docs/jobs.md shows (no config of their own), one that opts out of strict inputs, and
one whose validator raises what pydantic does not catch."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime

from pydantic import BaseModel, field_validator

from app.jobs import JobContext, job
from app.settings import Settings
from tests.api.conftest import Api, open_api

PLAIN = "test-plain"
LAX = "test-lax"
BROKEN = "test-broken-check"


class Window(BaseModel):
    start: int = 0


class PlainIn(BaseModel):
    """No model_config: pydantic alone would coerce "5" and ignore unknown fields."""

    limit: int = 10
    ratio: float = 0.5
    when: datetime | None = None
    window: Window = Window()


class PlainOut(BaseModel):
    limit: int


@job(name=PLAIN, description="Written as docs/jobs.md shows.")
def plain(ctx: JobContext, inp: PlainIn) -> PlainOut:
    return PlainOut(limit=inp.limit)


@job(name=LAX, strict_input=False, description="Reads inputs as its model says.")
def lax(ctx: JobContext, inp: PlainIn) -> PlainOut:
    return PlainOut(limit=inp.limit)


class BrokenIn(BaseModel):
    text: str = ""

    @field_validator("text")
    @classmethod
    def _checked(cls, text: str) -> str:
        if text == "boom":
            raise RuntimeError("a bug in the type's own check")
        return text


@job(name=BROKEN, description="Its input check has a bug.")
def broken(ctx: JobContext, inp: BrokenIn) -> PlainOut:
    return PlainOut(limit=0)


def with_these_types(settings: Settings) -> Settings:
    """The settings, with these job types registered as well as the built-in ones."""
    return settings.model_copy(update={"job_modules": [__name__]})


@contextlib.asynccontextmanager
async def api_with(settings: Settings) -> AsyncIterator[Api]:
    """The API, with these job types registered as well as the built-in ones."""
    async with open_api(with_these_types(settings)) as api:
        yield api
