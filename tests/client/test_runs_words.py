"""A preempted job's runs in the CLI's words, as its bill counts them: the time of all its runs
(not the last run's alone), how many, and its preemptions in the tense of its status."""

from __future__ import annotations

import io

from rich.console import Console

from app.client.render import live_line, task_table
from app.models import JobResult, Status, TaskStatus
from app.usage_models import BillingRecord

TASK = "0b7d2a4e-6c1f-4b8e-9d2a-3f5e6a7b8c38"
NOW = 1_800_000_000.0


def shown(state: TaskStatus, bill: BillingRecord | None = None) -> str:
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(task_table(state, bill))
    return out.getvalue()


def status(how: Status, **fields: object) -> TaskStatus:
    """A job of 30 s preempted once after 5.068 s, in the state `how`."""
    base: dict[str, object] = {
        "task_id": TASK,
        "status": how,
        "kind": "long",
        "attempts": 1,
        "preemptions": 1,
        "runs": 1,
        "ran_s": 5.068,
        "enqueued_at": NOW - 60,
    }
    return TaskStatus.model_validate(base | fields)


def result(started_at: float, finished_at: float | None = None) -> JobResult:
    return JobResult(
        worker="gpu0@a",
        gpu_id=0,
        duration_s=30,
        enqueued_at=NOW - 60,
        started_at=started_at,
        finished_at=finished_at,
    )


def test_an_ended_preempted_job_shows_all_its_runs_as_its_bill_does() -> None:
    """Its last run ran 15 s; its bill counts 20.068 s over 2 runs: so does its status."""
    ended = status(
        Status.SUCCESS,
        attempts=2,
        runs=2,
        ran_s=20.068,
        result=result(NOW - 15, NOW),
    )
    bill = BillingRecord(
        user_id="11111111-1111-1111-1111-111111111111",
        task_id=TASK,
        cost=0.020068,
        cost_micros=20068,
        description="Long GPU job, over 2 runs",
        kind="long",
        gpu_seconds=20.068,
        billed_seconds=20.068,
        billed_at=NOW,
    )
    text = shown(ended, bill)
    assert "20 s of 30 s asked over 2 runs" in text
    assert "15 s" not in text  # the last run alone is not what the job ran
    assert "resumes" not in text and "1 run yielded the GPU" in text  # past: it has ended
    assert "(its last run)" in text  # started_at is the last run's, and says so
    line = live_line(ended, NOW).plain
    assert "ran 20 s over 2 runs" in line


def test_a_job_waiting_after_a_preemption_shows_its_run_and_that_it_resumes() -> None:
    waiting = status(Status.PENDING, position=0, waiting_for="gpu")
    text = shown(waiting)
    assert [line.split() for line in text.splitlines() if line.startswith("attempts")] == [
        ["attempts", "1"]
    ]
    assert "it resumes from its checkpoint" in text
    assert "5.1 s so far" in text
    assert "ran 5.1 s so far" in live_line(waiting, NOW).plain


def test_a_resumed_run_counts_the_earlier_runs_time_too() -> None:
    running = status(Status.STARTED, attempts=2, runs=2, result=result(NOW - 3))
    line = live_line(running, NOW).plain
    assert "running 8.1 s over 2 runs" in line  # 5.068 s before, 3 s now
    assert "it resumed from its checkpoint" in shown(running)
