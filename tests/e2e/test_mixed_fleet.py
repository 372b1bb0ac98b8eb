"""A mixed fleet of real processes (issue 41): an API and CPU workers acting as cards of two
classes on two simulated hosts. A job that needs more memory than the small cards hold runs only
on the big one, one that asks for the small class only on the small ones, and a job that either
may run does not wait behind a flood of big-card jobs while a small card is free; each result
says where it ran, and a need no class meets is refused at submit."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import ended, job, post_job, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
CATALOG = json.dumps(
    {"big": {"memory_gb": 80, "price": 2.0}, "small": {"memory_gb": 24, "price": 1.0}}
)
WORKERS = {"big0": ("big", "node-a"), "small0": ("small", "node-b"), "small1": ("small", "node-b")}


def submit(stack: Stack, duration_s: float, gpu: dict[str, Any] | None = None) -> str:
    body: dict[str, Any] = {"type": "burn", "duration_s": duration_s, "kind": "short"}
    if gpu is not None:
        body["gpu"] = gpu
    reply = post_job(stack, body)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["task_id"])


def where(state: dict[str, Any]) -> tuple[str, str]:
    assert state["status"] == "SUCCESS", state
    return state["result"]["gpu_class"], state["result"]["host"]


def test_jobs_run_only_on_the_cards_they_may_use(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(0, gpu_classes=CATALOG)
    for name, (gpu_class, host) in WORKERS.items():
        stack.start_worker(name, env={"WORKER_GPU_CLASS": gpu_class, "WORKER_HOST": host})
    stack.wait_for_workers()

    refused = post_job(
        stack, {"type": "burn", "duration_s": 0.1, "kind": "short", "gpu": {"min_memory_gb": 100}}
    )
    assert refused.status_code == 422, refused.text
    assert "gpu" in refused.text

    # A flood that only the big card may run, then one job that any card may run.
    big = [submit(stack, 2.0, {"min_memory_gb": 40}) for _ in range(4)]
    anywhere = submit(stack, 0.1)
    small = [submit(stack, 0.1, {"classes": ["small"]}) for _ in range(3)]

    # The job any card may run does not wait for the flood: a small card takes it at once.
    first = ended(stack, anywhere)
    assert where(first) == ("small", "node-b")
    assert any(job(stack, b)["status"] != "SUCCESS" for b in big), "the flood was not waiting"
    for task_id in small:
        assert where(ended(stack, task_id)) == ("small", "node-b")
    for task_id in big:
        assert where(ended(stack, task_id)) == ("big", "node-a")


def test_a_job_no_live_card_can_run_waits_for_one(make_stack: Callable[..., Stack]) -> None:
    """Only small cards are up: a job that needs the big class is accepted and waits, saying
    so, and runs once a big card joins."""
    stack = make_stack(0, gpu_classes=CATALOG)
    stack.start_worker("small0", env={"WORKER_GPU_CLASS": "small", "WORKER_HOST": "node-b"})
    stack.wait_for_workers()
    task_id = submit(stack, 0.1, {"classes": ["big"]})
    waiting = wait_for(
        lambda: (s := job(stack, task_id))["waiting_for"] == "gpu_class" and s,
        30,
        "the job says it waits for a card of its class",
    )
    assert waiting["status"] == "PENDING"
    stack.start_worker("big0", env={"WORKER_GPU_CLASS": "big", "WORKER_HOST": "node-a"})
    assert where(ended(stack, task_id)) == ("big", "node-a")
