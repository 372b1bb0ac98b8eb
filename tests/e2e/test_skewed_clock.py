"""One clock: a worker on a host whose clock is minutes off behaves as any other, because every
time that processes compare is Redis's (leases, heartbeats, a job's start and end, when a busy
worker frees). The worker runs under libfaketime (Debian's `faketime`), five minutes behind."""

from __future__ import annotations

import glob
import shutil
from collections.abc import Callable

import httpx
import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import DEMO_KEY, wait_for
from tests.e2e.test_jobs import status, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
SKEW = "-5m"
LIBFAKETIME = sorted(
    glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    + glob.glob("/usr/lib/faketime/libfaketime.so.1")
)


def skewed() -> dict[str, str]:
    """The environment that sets a process's clock SKEW off."""
    if not LIBFAKETIME or shutil.which("faketime") is None:
        pytest.skip(
            "libfaketime is not installed (Debian's `faketime` package; .ci/run installs it)"
        )
    return {"LD_PRELOAD": LIBFAKETIME[0], "FAKETIME": SKEW}


def short_workers(stack: Stack) -> int:
    reply = httpx.get(f"{stack.url}/admin/queues", headers={"X-API-Key": DEMO_KEY}, timeout=10)
    return int(next(q for q in reply.json()["queues"] if q["name"] == "short")["workers"])


def test_a_worker_whose_clock_is_minutes_off_is_alive_estimated_right_and_keeps_its_leases(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(workers=0)
    stack.start_worker("skewed", env=skewed())
    wait_for(lambda: short_workers(stack) == 1, what="the skewed worker seen alive")

    first = submit(stack, DEMO_KEY, duration_s=4)
    running = wait_for(
        lambda: (s := status(stack, DEMO_KEY, first))["status"] == "STARTED" and s,
        what="the first job to start",
    )
    second = submit(stack, DEMO_KEY, duration_s=1)
    started_at = float(running["result"]["started_at"])  # type: ignore[index]

    def estimate() -> float | None:
        """The second job's estimated start, once the estimates have seen the first start (they
        read the queues at most once a second)."""
        found = status(stack, DEMO_KEY, second)["estimated_start_at"]
        return found if isinstance(found, float) and found > started_at + 2 else None

    # when the first job should end, on Redis's clock; a busy_until stamped on the worker's own
    # clock would have put it five minutes in the past, and the estimate at "now"
    expected = wait_for(estimate, timeout=3, what="an estimate after the first job's end")
    assert abs(expected - (started_at + 4)) < 2, (expected, started_at)

    for task_id in (first, second):
        done = wait_for(
            lambda t=task_id: (s := status(stack, DEMO_KEY, t))["status"] == "SUCCESS" and s,
            what="the jobs to succeed",
        )
        assert done["attempts"] == 1  # its lease held throughout: no run lost, none repeated
    bills = httpx.get(f"{stack.url}/billing-records", headers={"X-API-Key": DEMO_KEY}).json()
    assert sorted(b["task_id"] for b in bills) == sorted([first, second])
    assert short_workers(stack) == 1
