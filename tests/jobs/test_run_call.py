"""run_call, in this process: how a job's end is read, without a child to spawn."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from app.jobs import JobContext, Registry, job, load_registry
from app.jobs.registry import Runnable
from app.worker.calls import Call, Reply
from app.worker.job_process import run_call
from tests.jobs.sample import EchoOut, Nothing


@job(name="as-dict", description="Returns a dict that the output model validates.")
def as_dict(ctx: JobContext, inp: Nothing) -> EchoOut:
    out: Any = {"upper": "FROM A DICT"}
    return out  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def registry() -> Registry:
    registry = load_registry(["tests.jobs.sample"], entry_points=False)
    registry.add(as_dict)
    return registry


def run(
    registry: Registry,
    type_: str,
    inp: dict[str, Any] | None = None,
    stop: bool = False,
    runnables: dict[str, Runnable] | None = None,
) -> Reply:
    call = Call("t1", type_, json.dumps(inp or {}), 10, None)
    ctx = JobContext("t1", None, None, time.time() + 10, _stop=lambda: stop)
    return run_call(registry, {} if runnables is None else runnables, call, ctx)


def test_success_carries_the_output_as_json(registry: Registry) -> None:
    reply = run(registry, "echo", {"text": "hi"})
    assert (reply.end, reply.output, reply.error) == ("success", '{"upper":"HI"}', None)
    assert reply.peak_rss_bytes is not None and reply.peak_rss_bytes > 0
    ended = reply.ended(1.5)
    assert (ended.end, ended.seconds, ended.output) == ("success", 1.5, reply.output)


def test_an_output_the_model_validates_from_is_accepted(registry: Registry) -> None:
    assert run(registry, "as-dict").output == '{"upper":"FROM A DICT"}'


def test_a_job_that_ends_after_its_cancel_is_cancelled(registry: Registry) -> None:
    reply = run(registry, "echo", {"text": "hi"}, stop=True)
    assert (reply.end, reply.output) == ("cancelled", None)


def test_a_job_that_raises_its_cancel_is_cancelled(registry: Registry) -> None:
    assert run(registry, "polite", {"seconds": 5}, stop=True).end == "cancelled"


def test_a_failed_setup_is_tried_again_on_a_fresh_instance(registry: Registry) -> None:
    runnables: dict[str, Runnable] = {}
    first = run(registry, "shaky", runnables=runnables)
    assert first.end == "exception"
    assert "shaky" not in runnables
    assert run(registry, "shaky", runnables=runnables).end == "success"
    assert "shaky" in runnables


@pytest.mark.parametrize(
    ("type_", "inp", "says"),
    [
        ("fail", {}, "ValueError: the job failed on purpose"),
        ("huge", {}, "over the limit of 65536 bytes"),
        ("echo", {"text": 3}, "validation error"),
        ("nope", {}, "unknown job type 'nope'"),
        ("needs-extra", {}, "needs fairgpu_no_such_package"),
    ],
)
def test_a_job_that_cannot_end_well_is_an_exception(
    registry: Registry, type_: str, inp: dict[str, Any], says: str
) -> None:
    reply = run(registry, type_, inp)
    assert (reply.end, reply.output) == ("exception", None)
    assert says in (reply.error or "")
