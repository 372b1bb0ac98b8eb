"""What users and operators see of the queue through real processes: place in line, estimated
start, the metrics, and the operator's view of a live worker."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.dev.stack import Stack
from tests.e2e.conftest import DEMO_KEY, OTHER_KEY, wait_for
from tests.e2e.test_jobs import finished, status, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
#: The running job's length: the queued job's place and estimate are read while it waits behind
#: it, which on a busy machine may take seconds.
RUNNING_S = 15.0


def metrics(stack: Stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reply = httpx.get(f"{stack.url}/metrics", timeout=10)
    assert reply.status_code == 200, reply.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


def live_workers(stack: Stack) -> float:
    return metrics(stack)[("fairgpu_workers", (("queue", "short"),))]


def test_a_job_behind_a_running_one_is_told_its_place_and_when_it_should_start(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(workers=1)  # one worker, serving both queues
    wait_for(lambda: live_workers(stack) == 1, what="the worker's heartbeat")
    running = submit(stack, DEMO_KEY, kind="long", duration_s=RUNNING_S)
    wait_for(lambda: status(stack, DEMO_KEY, running)["status"] == "STARTED", what="a start")
    started_at = status(stack, DEMO_KEY, running)["result"]["started_at"]  # type: ignore[index]

    queued = submit(stack, OTHER_KEY, kind="short", duration_s=1)

    def told() -> dict[str, object] | None:
        """The queued job's status once its estimate counts the running job (the estimates
        read the workers at most once a second)."""
        state = status(stack, OTHER_KEY, queued)
        assert state["status"] == "PENDING", "the running job ended before the estimate came"
        estimate = state["estimated_start_at"]
        counted = isinstance(estimate, float) and estimate > started_at + RUNNING_S / 2
        return state if counted else None

    state = wait_for(told, timeout=RUNNING_S, what="the queued job's estimate")
    assert state["position"] == 0
    # The only worker is busy with the long job, which asked for RUNNING_S: the short job
    # starts when that one ends, not now, although no short job is running (the worker stamps
    # that end a moment after the start).
    assert state["estimated_start_at"] == pytest.approx(started_at + RUNNING_S, abs=3.0)
    wait_for(
        lambda: finished(stack, OTHER_KEY, queued),
        timeout=RUNNING_S + 60,
        what="the queued job to finish",
    )
    assert status(stack, OTHER_KEY, queued)["estimated_start_at"] is None


def test_metrics_count_a_finished_job_its_wait_run_and_bill(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(workers=1)
    task_id = submit(stack, DEMO_KEY, duration_s=0.2)
    wait_for(lambda: finished(stack, DEMO_KEY, task_id), what="the job to finish")
    short = (("queue", "short"),)
    # The record ends just before the worker's late ack gives the lease back.

    def acked() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        seen = metrics(stack)
        return seen if seen[("fairgpu_jobs_in_flight", short)] == 0 else None

    seen = wait_for(acked, what="the worker's ack")
    assert seen[("fairgpu_jobs_finished_total", (("queue", "short"), ("status", "SUCCESS")))] == 1
    assert seen[("fairgpu_job_attempts_total", short)] == 1
    assert seen[("fairgpu_job_wait_seconds_count", short)] == 1
    assert seen[("fairgpu_job_run_seconds_count", short)] == 1
    assert seen[("fairgpu_job_run_seconds_sum", short)] >= 0.2
    # a 0.2 s job is billed the 1 s minimum (MIN_BILLED_S)
    assert seen[("fairgpu_billed_gpu_seconds_total", short)] == 1
    assert seen[("fairgpu_jobs_queued", short)] == 0
    assert seen[("fairgpu_jobs_in_flight", short)] == 0
