"""A run's stop (app/worker/deadline.py), as a pure rule of what was asked, when: a later ask
never moves a running deadline later, a cancel or a timeout is final, and a run that ends past
its declared seconds (beyond the tolerance) is a timeout whatever it returned."""

from __future__ import annotations

from app.store import Started
from app.worker.calls import Ended, EndKind
from app.worker.deadline import TIMEOUT_TOLERANCE_S, Deadline
from app.worker.yields import budget

BUDGET_S = 10.0
SUCCESS = Ended("success", BUDGET_S, output='{"done": true}')


def test_a_cancel_during_a_yields_grace_keeps_the_earlier_deadline() -> None:
    stop = Deadline()
    assert stop.ask("preempt", 0.0, 2.0)
    assert stop.ask("cancel", 1.0, 30.0)  # the job must be told (it sees ctx.cancelled)...
    assert (stop.reason, stop.at) == ("cancel", 2.0)  # ...but the yield's deadline stands
    assert not stop.due(1.9) and stop.due(2.0)
    assert stop.killed(BUDGET_S) == "the job did not yield within 2 s of the ask: stopped"


def test_a_later_ask_never_moves_a_running_deadline_later() -> None:
    for first, second in [("cancel", "timeout"), ("timeout", "cancel"), ("preempt", "timeout")]:
        stop = Deadline()
        stop.ask(first, 0.0, 1.0)  # type: ignore[arg-type]
        stop.ask(second, 0.5, 60.0)  # type: ignore[arg-type]
        assert stop.at == 1.0, (first, second)


def test_a_sooner_deadline_of_a_later_ask_counts() -> None:
    stop = Deadline()
    stop.ask("preempt", 0.0, 30.0)
    stop.ask("timeout", 1.0, 5.0)  # its seconds are up: it has the timeout's grace, not more
    assert (stop.reason, stop.at, stop.by) == ("timeout", 6.0, "timeout")


def test_a_cancel_or_a_timeout_is_final_and_asked_once() -> None:
    stop = Deadline()
    assert stop.ask("timeout", 0.0, 5.0)
    assert not stop.ask("cancel", 1.0, 1.0)  # the first final ask names the end
    assert not stop.ask("preempt", 1.0, 1.0)
    assert (stop.reason, stop.at) == ("timeout", 5.0)


def test_a_run_that_ends_within_the_tolerance_of_its_budget_keeps_its_end() -> None:
    on_time = Ended("success", BUDGET_S + TIMEOUT_TOLERANCE_S / 2, output="{}")
    assert Deadline().overran(on_time, BUDGET_S, TIMEOUT_TOLERANCE_S) == on_time


def test_a_run_that_returns_past_its_budget_is_a_timeout_and_its_output_is_dropped() -> None:
    late = Ended("success", BUDGET_S + 1.0, output='{"done": true}')
    ended = Deadline().overran(late, BUDGET_S, TIMEOUT_TOLERANCE_S)
    assert (ended.end, ended.output, ended.seconds) == ("timeout", None, BUDGET_S + 1.0)
    assert "ran past its budget of 10 s" in (ended.error or "")


def test_a_run_asked_to_stop_at_its_budget_is_a_timeout_whatever_it_says() -> None:
    stop = Deadline()
    stop.ask("timeout", BUDGET_S, 5.0)
    said: tuple[EndKind, ...] = ("cancelled", "exception", "preempted", "success")
    for end in said:  # "cancelled": the flag it saw is the cancel's
        ended = stop.overran(Ended(end, BUDGET_S, output="{}"), BUDGET_S, TIMEOUT_TOLERANCE_S)
        assert (ended.end, ended.output) == ("timeout", None), end


def test_a_run_cancelled_before_its_budget_ran_out_keeps_the_cancel() -> None:
    stop = Deadline()
    stop.ask("cancel", BUDGET_S - 1, 5.0)
    cancelled = Ended("cancelled", BUDGET_S + 1.0)
    assert stop.overran(cancelled, BUDGET_S, TIMEOUT_TOLERANCE_S) == cancelled


def test_a_resumed_run_gets_what_is_left_of_the_budget_never_more() -> None:
    first = Started(run=True, duration_s=20.0)
    assert budget(first) == 20.0
    assert budget(Started(run=True, duration_s=20.0, preemptions=1, ran_s=18.5)) == 1.5
    assert budget(Started(run=True, duration_s=20.0, preemptions=2, ran_s=20.1)) == 0.0
