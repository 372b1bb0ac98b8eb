"""Job types of the API tests, put on JOB_MODULES by the tests that need them (see `api_with`):
one with a nested input, and one whose dependency is not installed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict

from app.jobs import JobContext, job
from app.settings import Settings
from tests.api.conftest import Api, open_api

ECHO = "test-echo"
MISSING = "test-missing"
ECHO_MAX_S = 10.0


class Point(BaseModel):
    model_config = ConfigDict(extra="forbid")

    x: int
    y: int


class EchoIn(BaseModel):
    """Some text, and points to show nested errors."""

    model_config = ConfigDict(extra="forbid")

    text: str
    points: list[Point] = []


class EchoOut(BaseModel):
    text: str


@job(name=ECHO, queue="long", max_duration_s=ECHO_MAX_S, description="Says its text back.")
def echo(ctx: JobContext, inp: EchoIn) -> EchoOut:
    return EchoOut(text=inp.text)


@job(name=MISSING, requires=("fairgpu_no_such_package",), description="Needs what is not here.")
def missing(ctx: JobContext, inp: EchoIn) -> EchoOut:
    raise AssertionError("never runs: its dependency is not installed")


def with_these_types(settings: Settings) -> Settings:
    """The settings, with these job types registered as well as the built-in ones."""
    return settings.model_copy(update={"job_modules": [__name__]})


@contextlib.asynccontextmanager
async def api_with(settings: Settings) -> AsyncIterator[Api]:
    """The API, with these job types registered as well as the built-in ones."""
    async with open_api(with_these_types(settings)) as api:
        yield api
