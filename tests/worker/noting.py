"""Job types that note facts of their runs (ctx.note) and end them with a failure kind of their
own (JobFailedError), as the script type does; light to import, as a job child imports it
(JOB_MODULES=tests.worker.noting)."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis
from pydantic import BaseModel

from app.jobs import JobContext, JobFailedError, JobPreemptedError, job
from app.store.keys import ask_key, asked_for_key, job_key

WAIT_S = 10.0  # the most a job waits for an ask it made (a test fails before)


class Code(BaseModel):
    code: int


class Nothing(BaseModel):
    pass


class Ask(BaseModel):
    """Where a job that asks for its own stop finds Redis ('': the test asks)."""

    redis_url: str = ""


@job(name="exits", max_duration_s=30)
def exits(ctx: JobContext, inp: Code) -> Nothing:
    """A script's run: notes its exit code, and fails with it unless it is 0."""
    ctx.note(exit_code=inp.code)
    if inp.code != 0:
        raise JobFailedError(f"the script exited with code {inp.code}", "exit_code")
    return Nothing()


@job(name="no-environment", max_duration_s=30)
def no_environment(ctx: JobContext, inp: Nothing) -> Nothing:
    """An environment whose build failed after a quarter of a second."""
    ctx.note(environment={"cached": False, "seconds": 0.25})
    raise JobFailedError("the environment could not be built: no such package", "environment")


@job(name="cached", max_duration_s=30)
def cached(ctx: JobContext, inp: Nothing) -> Nothing:
    """A script run in a cached environment that exits 0; its first note of the code is
    replaced by a later one (the last of a name wins)."""
    ctx.note(exit_code=99, environment={"cached": True, "seconds": 0.0})
    ctx.note(exit_code=0)
    return Nothing()


def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)


@job(name="noted-then-cancelled", max_duration_s=30)
def noted_then_cancelled(ctx: JobContext, inp: Ask) -> Nothing:
    """Notes, is cancelled by its owner (it marks its own job as revoke.lua does, where given
    Redis), and stops as asked."""
    ctx.note(exit_code=-15, environment={"cached": True, "seconds": 0.0})
    if inp.redis_url:
        client = redis.Redis.from_url(inp.redis_url)
        client.hset(job_key(ctx.task_id), "cancel", "owner")
        client.close()
    _until(lambda: ctx.cancelled)
    ctx.check_cancelled()
    return Nothing()


@job(name="noted-then-deaf", max_duration_s=30)
def noted_then_deaf(ctx: JobContext, inp: Nothing) -> Nothing:
    """Notes, then ignores its cancel: it is killed with its process."""
    ctx.note(exit_code=-9)
    time.sleep(WAIT_S)
    return Nothing()


@job(name="yields-then-notes", max_duration_s=30, preemptible=True)
def yields_then_notes(ctx: JobContext, inp: Ask) -> Nothing:
    """Its first run notes a code and asks itself to yield to OWED (as the policy would), then
    yields; its second notes only its environment."""
    if ctx.preemptions == 0:
        ctx.note(exit_code=1)
        client = redis.Redis.from_url(inp.redis_url)
        client.set(ask_key(ctx.task_id), "OWED short")
        client.set(asked_for_key("OWED"), ctx.task_id)
        client.close()
        _until(lambda: ctx.preempted)
        raise JobPreemptedError("yielded")
    ctx.note(environment={"cached": True, "seconds": 0.0})
    return Nothing()


TYPES = [exits, no_environment, cached, noted_then_cancelled, noted_then_deaf, yields_then_notes]
