"""One clock: a worker on a host whose clock is minutes off behaves as any other, because every
time that processes compare is Redis's (leases, heartbeats, a job's start and end, when a busy
worker frees). The worker's wall clock runs five minutes behind (skewed_clock/sitecustomize.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import DEMO_KEY, wait_for
from tests.e2e.test_jobs import status, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
SKEW_S = -300.0
#: The first job's length: the second job's estimate is read while it waits behind it, which on
#: a busy machine may take seconds; a wrong estimate (stamped on the skewed clock) would be
#: about now instead, far from the first job's end.
FIRST_S = 15.0
SKEWED_CLOCK = Path(__file__).with_name("skewed_clock")


def skewed() -> dict[str, str]:
    """The environment of a Python process whose wall clock is SKEW_S off."""
    path = os.pathsep.join(filter(None, [str(SKEWED_CLOCK), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, "FAIRGPU_TEST_CLOCK_SKEW_S": str(SKEW_S)}


def test_the_skew_reaches_a_started_python() -> None:
    """The premise of the test below: a process given skewed() reads a clock SKEW_S off."""
    code = "import time; print(time.time())"
    env = {**os.environ, **skewed()}
    before = time.time()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    assert abs(float(out.stdout) - before - SKEW_S) < 30


def short_workers(stack: Stack) -> int:
    reply = httpx.get(f"{stack.url}/admin/queues", headers={"X-API-Key": DEMO_KEY}, timeout=10)
    return int(next(q for q in reply.json()["queues"] if q["name"] == "short")["workers"])


def test_a_worker_whose_clock_is_minutes_off_is_alive_estimated_right_and_keeps_its_leases(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(workers=0)
    stack.start_worker("skewed", env=skewed())
    wait_for(lambda: short_workers(stack) == 1, what="the skewed worker seen alive")

    first = submit(stack, DEMO_KEY, duration_s=FIRST_S)
    running = wait_for(
        lambda: (s := status(stack, DEMO_KEY, first))["status"] == "STARTED" and s,
        what="the first job to start",
    )
    second = submit(stack, DEMO_KEY, duration_s=1)
    started_at = float(running["result"]["started_at"])  # type: ignore[index]

    def estimate() -> float | None:
        """The second job's estimated start, once the estimates have seen the first start (they
        read the queues at most once a second)."""
        state = status(stack, DEMO_KEY, second)
        assert state["status"] == "PENDING", "the first job ended before an estimate was seen"
        found = state["estimated_start_at"]
        return found if isinstance(found, float) and found > started_at + FIRST_S / 2 else None

    # when the first job should end, on Redis's clock; a busy_until stamped on the worker's own
    # clock would have put it five minutes in the past, and the estimate at "now"
    expected = wait_for(estimate, timeout=FIRST_S, what="an estimate after the first job's end")
    assert abs(expected - (started_at + FIRST_S)) < FIRST_S / 3, (expected, started_at)

    for task_id in (first, second):
        done = wait_for(
            lambda t=task_id: (s := status(stack, DEMO_KEY, t))["status"] == "SUCCESS" and s,
            timeout=FIRST_S + 60,
            what="the jobs to succeed",
        )
        assert done["attempts"] == 1  # its lease held throughout: no run lost, none repeated
    bills = httpx.get(f"{stack.url}/billing-records", headers={"X-API-Key": DEMO_KEY}).json()
    assert sorted(b["task_id"] for b in bills) == sorted([first, second])
    assert short_workers(stack) == 1
