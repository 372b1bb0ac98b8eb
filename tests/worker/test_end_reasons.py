"""What each reason for a run's end records (app/worker/ends.py RunEnds.of): the reason comes on
the end, as its stop check or executor named it, and nothing is read again to learn it."""

from __future__ import annotations

import pytest

from app.models import Status
from app.settings import Settings
from app.store import Started
from app.worker.calls import Ended
from app.worker.end_reason import OUTSIDE_STOPS, Why
from app.worker.ends import RunEnds
from tests.support import FIXTURES

ENDS = RunEnds(Settings(users_file=FIXTURES))
STARTED = Started(run=True, attempt=1, owner="alice", duration_s=30.0)


def recorded(ended: Ended) -> tuple[str, Status | None, bool]:
    """What happened, the status recorded (None: nothing) and whether it is billed."""
    outcome, end = ENDS.of("short", "job-1", STARTED, ended)
    if end is None:
        return outcome, None, False
    return outcome, end.status, end.charge is not None


@pytest.mark.parametrize(
    ("why", "what"),
    [
        (Why.CANCEL, ("cancelled", Status.REVOKED, True)),
        (Why.OPERATOR, ("stopped by an operator", Status.REVOKED, False)),
        (Why.LEASE_LOST, ("lease lost", None, False)),
        (None, ("lease lost", None, False)),  # a stop from nowhere known: as before reasons
    ],
)
def test_a_stop_records_what_its_reason_says(
    why: Why | None, what: tuple[str, Status | None, bool]
) -> None:
    assert recorded(Ended("cancelled", 4.0, why=why)) == what


@pytest.mark.parametrize("why", [Why.TIMEOUT, Why.OVER_BUDGET])
def test_a_run_out_of_its_seconds_fails_timeout_billed(why: Why) -> None:
    assert recorded(Ended("timeout", 31.0, why=why)) == ("failed: timeout", Status.FAILURE, True)


def test_a_dead_child_fails_crashed_billed() -> None:
    assert recorded(Ended("crashed", 3.0, why=Why.CHILD_DIED)) == (
        "failed: crashed",
        Status.FAILURE,
        True,
    )


def test_only_the_stops_end_a_run_cancelled() -> None:
    assert {why for why in Why if why.stop} == OUTSIDE_STOPS
    assert {why for why in Why if why.billed} == {Why.CANCEL}
