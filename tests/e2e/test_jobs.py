"""A job's whole life through real processes, spoken to over HTTP only."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import DEMO_KEY, OTHER_KEY, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def submit(stack: Stack, key: str, kind: str = "short", duration_s: float = 0.2) -> str:
    reply = httpx.post(
        f"{stack.url}/enqueue-task",
        headers={"X-API-Key": key},
        json={"kind": kind, "duration_s": duration_s},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["status"] == "queued"
    return str(reply.json()["task_id"])


def status(stack: Stack, key: str, task_id: str) -> dict[str, object]:
    reply = httpx.get(f"{stack.url}/task-status/{task_id}", headers={"X-API-Key": key}, timeout=10)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def finished(stack: Stack, key: str, task_id: str) -> dict[str, object] | None:
    state = status(stack, key, task_id)
    return state if state["status"] in ("SUCCESS", "FAILURE", "REVOKED") else None


def bills(stack: Stack, key: str) -> list[dict[str, object]]:
    reply = httpx.get(f"{stack.url}/billing-records", headers={"X-API-Key": key}, timeout=10)
    assert reply.status_code == 200, reply.text
    return list(reply.json())


def streamed(stack: Stack, key: str, task_id: str) -> list[dict[str, object]]:
    """The events a fresh connection's stream of the job carries, until the server ends it."""
    seen: list[dict[str, object]] = []
    with httpx.stream(
        "GET", f"{stack.url}/task-status/stream/{task_id}", headers={"X-API-Key": key}, timeout=30
    ) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        for line in stream.iter_lines():
            if line.startswith("data:"):
                seen.append(json.loads(line.removeprefix("data:")))
    return seen


def test_job_streams_pending_started_success_and_is_billed_once(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(workers=1)
    task_id = submit(stack, DEMO_KEY, duration_s=0.3)
    seen = streamed(stack, DEMO_KEY, task_id)
    assert [e["status"] for e in seen] == ["PENDING", "STARTED", "SUCCESS"]
    result = seen[-1]["result"]
    assert isinstance(result, dict)
    assert result["worker"].startswith("cpu1@")
    assert result["gpu_id"] is None
    assert result["duration_s"] == 0.3
    assert result["enqueued_at"] <= result["started_at"] <= result["finished_at"]
    assert status(stack, DEMO_KEY, task_id)["status"] == "SUCCESS"

    records = bills(stack, DEMO_KEY)
    assert [r["task_id"] for r in records] == [task_id]
    assert records[0]["user_id"] == "11111111-1111-1111-1111-111111111111"

    other = httpx.get(
        f"{stack.url}/task-status/{task_id}", headers={"X-API-Key": OTHER_KEY}, timeout=10
    )
    assert (other.status_code, other.json()) == (404, {"detail": "task not found"})
    other_stream = httpx.get(
        f"{stack.url}/task-status/stream/{task_id}", headers={"X-API-Key": OTHER_KEY}, timeout=10
    )
    assert other_stream.status_code == 404
    assert bills(stack, OTHER_KEY) == []


def test_light_account_starts_before_the_heavy_accounts_fifth_job(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(workers=0)  # everything is queued before the one worker starts
    heavy = [submit(stack, DEMO_KEY, duration_s=0.2) for _ in range(20)]
    light = [submit(stack, OTHER_KEY, duration_s=0.2) for _ in range(2)]
    stack.start_worker("cpu1")
    for task_id in light:
        wait_for(lambda t=task_id: finished(stack, OTHER_KEY, t), what="the light jobs")
    fifth_heavy = wait_for(lambda: finished(stack, DEMO_KEY, heavy[4]), what="heavy's fifth")
    light_starts = [status(stack, OTHER_KEY, t)["result"]["started_at"] for t in light]  # type: ignore[index]
    assert max(light_starts) < fifth_heavy["result"]["started_at"]  # type: ignore[index]


def test_killed_worker_s_job_succeeds_on_another_with_one_bill(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(workers=2)
    # long enough that the kill comes while it runs, however slowly its start is seen
    task_id = submit(stack, DEMO_KEY, duration_s=10)
    started = wait_for(
        lambda: (s := status(stack, DEMO_KEY, task_id))["status"] == "STARTED" and s,
        what="the job to start",
    )
    victim = str(started["result"]["worker"]).split("@")[0]  # type: ignore[index]
    killed_at = time.time()
    stack.kill_worker(victim)
    done = wait_for(lambda: finished(stack, DEMO_KEY, task_id), timeout=90, what="the rerun")
    assert done["status"] == "SUCCESS"
    assert done["attempts"] == 2
    result = done["result"]
    assert isinstance(result, dict)
    assert not str(result["worker"]).startswith(f"{victim}@")
    assert result["started_at"] > started["result"]["started_at"]  # type: ignore[index]
    # Reported, not asserted (timing on a shared machine): lease 2 s + a reclaim round of 0.5 s.
    print(f"job back on a worker {result['started_at'] - killed_at:.2f} s after the kill")
    assert [r["task_id"] for r in bills(stack, DEMO_KEY)] == [task_id]


def test_cancelling_a_running_job_stops_it_and_bills_the_time_it_ran(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(workers=1)
    task_id = submit(stack, DEMO_KEY, duration_s=30)
    wait_for(lambda: status(stack, DEMO_KEY, task_id)["status"] == "STARTED", what="the start")
    reply = httpx.delete(f"{stack.url}/tasks/{task_id}", headers={"X-API-Key": DEMO_KEY})
    assert reply.status_code == 202, reply.text
    done = wait_for(lambda: finished(stack, DEMO_KEY, task_id), what="the cancelled job to end")
    assert done["status"] == "REVOKED"
    [record] = bills(stack, DEMO_KEY)
    assert record["task_id"] == task_id
    assert 0 < float(record["gpu_seconds"]) < 30  # type: ignore[arg-type]
    # The worker is free again: the next job runs.
    next_id = submit(stack, DEMO_KEY, duration_s=0.1)
    assert wait_for(lambda: finished(stack, DEMO_KEY, next_id))["status"] == "SUCCESS"
