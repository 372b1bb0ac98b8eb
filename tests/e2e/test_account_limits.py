"""Accounts' limits through real processes: max_running and max_held_gpu_seconds, set over HTTP,
held by several workers at once, with `waiting_for` saying why a job waits."""

from __future__ import annotations

import itertools

import httpx
import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import DEMO_KEY, OTHER_KEY, wait_for
from tests.e2e.test_jobs import bills, finished, status, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
OTHER = "22222222-2222-2222-2222-222222222222"


def limit(stack: Stack, **fields: object) -> None:
    """An admin changes the second account's limits."""
    reply = httpx.patch(
        f"{stack.url}/admin/accounts/{OTHER}",
        headers={"X-API-Key": DEMO_KEY},
        json=fields,
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    for name, value in fields.items():
        assert reply.json()[name] == value


def ended(stack: Stack, key: str, ids: list[str]) -> list[dict[str, object]]:
    """Wait for every job to end; their final states, each a SUCCESS."""
    states = [wait_for(lambda i=i: finished(stack, key, i), 60, f"job {i} ends") for i in ids]
    assert [s["status"] for s in states] == ["SUCCESS"] * len(ids)
    return states


def span(state: dict[str, object]) -> tuple[float, float]:
    result = state["result"]
    assert isinstance(result, dict)
    return float(result["started_at"]), float(result["finished_at"])


def test_max_running_holds_over_three_workers_and_the_others_take_them(
    make_stack: object,
) -> None:
    stack: Stack = make_stack(workers=3)  # type: ignore[operator]
    limit(stack, max_running=1)
    theirs = [submit(stack, OTHER_KEY, duration_s=1.5) for _ in range(3)]
    wait_for(lambda: status(stack, OTHER_KEY, theirs[0])["status"] == "STARTED", 30)
    waiting = status(stack, OTHER_KEY, theirs[2])
    assert waiting["status"] == "PENDING" and waiting["waiting_for"] == "account_limit"
    ours = [submit(stack, DEMO_KEY, duration_s=0.3) for _ in range(2)]
    their_spans = sorted(span(s) for s in ended(stack, OTHER_KEY, theirs))
    our_spans = [span(s) for s in ended(stack, DEMO_KEY, ours)]
    # never two of theirs at once, over three workers
    for (_, end), (start, _) in itertools.pairwise(their_spans):
        assert start >= end - 0.05
    # the idle workers took ours while theirs waited for their account's slot
    assert all(start < their_spans[2][0] for start, _ in our_spans)
    assert len(bills(stack, OTHER_KEY)) == 3 and len(bills(stack, DEMO_KEY)) == 2


def test_held_gpu_seconds_let_the_next_job_start_as_soon_as_they_have_run_down(
    make_stack: object,
) -> None:
    """A limit of 3 GPU-seconds and jobs of 2: the second may start once the first has run 1 s,
    well before it ends; a job of 4 is refused at once, naming the limit."""
    stack: Stack = make_stack(workers=2)  # type: ignore[operator]
    limit(stack, max_held_gpu_seconds=3.0)
    refused = httpx.post(
        f"{stack.url}/enqueue-task",
        headers={"X-API-Key": OTHER_KEY},
        json={"kind": "short", "duration_s": 4},
        timeout=10,
    )
    assert 400 <= refused.status_code < 500 and "max_held_gpu_seconds" in refused.text
    first, second = (submit(stack, OTHER_KEY, duration_s=2) for _ in range(2))
    states = ended(stack, OTHER_KEY, [first, second])
    (start1, end1), (start2, _) = span(states[0]), span(states[1])
    assert start2 - start1 >= 1.0 - 0.05  # not before 1 s of the first had run
    assert start2 < end1  # and not only once it ended
