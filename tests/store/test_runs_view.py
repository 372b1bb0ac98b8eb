"""A job's runs as its status shows them (JobRecord.runs, seconds_run, status_view): the runs and
seconds its bill counts, and its attempts, every run started."""

from __future__ import annotations

from app.models import Status
from app.store.record import JobRecord

JOB = "0b7d2f6e-0000-4000-8000-000000000038"


def record(**fields: str) -> JobRecord:
    """A job's hash as the scripts write it, with `fields` over a queued job's."""
    base = {
        "task_id": JOB,
        "owner": "11111111-1111-1111-1111-111111111111",
        "kind": "long",
        "duration_s": "100.0",
        "status": "PENDING",
        "attempts": "0",
        "enqueued_at": "1700000000.0",
    }
    return JobRecord.parse(base | fields)


def test_a_queued_job_has_had_no_run() -> None:
    view = record().status_view()
    assert (view.attempts, view.runs, view.ran_s) == (0, 0, 0.0)


def test_a_preempted_job_waiting_again_shows_its_run_and_seconds() -> None:
    view = record(preemptions="1", ran_s="5.25").status_view()
    assert (view.attempts, view.preemptions, view.runs, view.ran_s) == (1, 1, 1, 5.25)


def test_a_running_job_counts_its_run_under_way_but_not_its_seconds() -> None:
    started = record(status="STARTED", attempts="1", preemptions="2", ran_s="9.5")
    view = started.status_view()
    assert (view.attempts, view.runs, view.ran_s) == (3, 3, 9.5)


def test_an_ended_job_adds_its_last_billed_run() -> None:
    ended = record(
        status=Status.SUCCESS.value, attempts="1", preemptions="1", ran_s="5.0", run_s="15.068"
    )
    view = ended.status_view()
    assert (view.attempts, view.runs, view.ran_s) == (2, 2, 20.068)


def test_a_preempted_job_cancelled_while_it_waits_counts_only_its_earlier_runs() -> None:
    revoked = record(status=Status.REVOKED.value, preemptions="1", ran_s="5.0")
    assert (revoked.status_view().runs, revoked.status_view().ran_s) == (1, 5.0)


def test_earlier_runs_are_ran_runs_where_the_hash_has_it() -> None:
    """A lost run billed to its checkpoint is an earlier run of the bill too (ran_runs counts
    those with the preempted ones); without the field, the preemptions are the earlier runs."""
    lost_and_billed = record(status="STARTED", attempts="2", preemptions="1", ran_runs="2")
    assert lost_and_billed.status_view().runs == 3
    assert lost_and_billed.status_view().attempts == 3
