"""Declaring less buys no GPU time, through real processes (the API and a worker with the sample
job types, spoken to over HTTP): a job still running at its declared seconds is asked to stop
there; one that ends in the grace (TIMEOUT_GRACE_S, for stopping cleanly) ends FAILURE `timeout`
whatever it returned, billed its declared seconds, and so does one killed past the grace; a job
that ends at its declared seconds (burn, by design) succeeds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.dev.stack import Stack
from tests.e2e.test_real_jobs import bill_of, run
from tests.support import fast_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
GRACE_S = 3.0  # TIMEOUT_GRACE_S: long enough that a job ending within it is not killed


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = fast_settings(
        job_modules=["tests.jobs.sample"], timeout_grace_s=GRACE_S, min_billed_s=0.1
    )
    workdir: Path = tmp_path_factory.mktemp("overruns")
    with Stack(settings, use_given_redis=False, workers=1, workdir=workdir) as s:
        yield s


def child_pid(stack: Stack) -> int:
    """The pid of the worker's warm child, as a job sees it."""
    done = run(stack, "counted", {})
    assert done["status"] == "SUCCESS", done["error"]
    return int(done["result"]["output"]["pid"])


def billed(stack: Stack, done: dict[str, Any]) -> dict[str, Any]:
    [bill] = bill_of(stack, done["task_id"])
    return bill


@pytest.mark.parametrize("job_type", ["sleepy", "polite"])
def test_a_job_declaring_1_s_that_ends_within_the_grace_fails_timeout_billed_1_s(
    stack: Stack, job_type: str
) -> None:
    # sleepy ignores everything and returns at 1.5 s; polite stops when its budget's end asks
    # it to (ctx.cancelled). Both end by themselves, within the grace: no kill.
    before = child_pid(stack)
    done = run(stack, job_type, {"seconds": 1.5}, duration_s=1)
    assert (done["status"], done["error_kind"]) == ("FAILURE", "timeout")
    assert done["result"]["output"] is None  # its work past 1 s is not the job's output
    assert "ran past its budget of 1 s" in done["error"]
    bill = billed(stack, done)
    assert bill["billed_seconds"] == 1.0  # what it declared
    assert bill["gpu_seconds"] > 1.0  # what it ran is on the bill
    assert child_pid(stack) == before  # it stopped by itself


def test_a_job_running_past_the_grace_is_killed_and_billed_its_declared_seconds(
    stack: Stack,
) -> None:
    before = child_pid(stack)
    done = run(stack, "sleepy", {"seconds": 60}, duration_s=1)
    assert (done["status"], done["error_kind"]) == ("FAILURE", "timeout")
    assert "killed" in done["error"]
    bill = billed(stack, done)
    assert bill["billed_seconds"] == 1.0
    assert bill["gpu_seconds"] > 1.0 + GRACE_S  # asked at 1 s, killed a grace later
    assert child_pid(stack) != before  # the kill cost the child


def test_a_job_that_ends_at_its_declared_seconds_succeeds(stack: Stack) -> None:
    done = run(stack, "burn", {}, duration_s=1)
    assert (done["status"], done["error_kind"]) == ("SUCCESS", None), done["error"]
    assert billed(stack, done)["billed_seconds"] <= 1.0
