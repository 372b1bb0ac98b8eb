"""scripts/load.py --scenario gangs at its smallest: both rounds run on stacks of their own. With
reservations no stream job submitted after the 2-card job starts before it (its cards are kept
for it: a job leased as it was submitted may still start a moment after); without them it
starts only once the stream's jobs have all started. Those are orders of events, not timings:
the bound itself is the full run's to report (docs/fairness.md, "Jobs of several cards"). The
analyses are checked on made-up runs too."""

from __future__ import annotations

import pytest

from scripts.benchkit.fairness.gangs import STREAM_S, bound_round, share_round
from scripts.benchkit.fairness.metrics import Run
from tests.scripts.scenario_run import scenario


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_the_gangs_scenario_keeps_the_cards_for_the_two_card_job() -> None:
    outcome, tables = scenario("gangs", "0.1")
    on, off = outcome["bound"]
    assert (on["reservations"], off["reservations"]) == (True, False)
    assert on["passed"] == 0, on
    assert off["pair_wait_s"] >= off["stream_end_after_s"] - STREAM_S, off  # after every start
    assert "reservations on" in tables and "reservations off" in tables


def test_the_bound_counts_the_declared_ends_of_what_ran_at_the_submit() -> None:
    pair = Run("pair", enqueued=10.0, started=14.0, finished=16.0)
    stream = [
        Run("stream", enqueued=0.0, started=7.0, finished=11.0),  # running at the submit
        Run("stream", enqueued=0.0, started=9.0, finished=13.0),  # running at the submit
        Run("stream", enqueued=0.0, started=2.0, finished=6.0),  # over before it
        Run("stream", enqueued=0.0, started=16.0, finished=20.0),  # after its start
    ]
    r = bound_round(True, pair, stream, grace_s=5.0)
    assert r.pair_wait_s == 4.0
    assert r.bound_s == pytest.approx(9.0 + STREAM_S + 5.0 - 10.0 + 2.0)
    assert (r.ran_between, r.passed, r.stream_end_after_s) == (0, 0, 10.0)
    late = Run("stream", enqueued=11.0, started=12.0, finished=16.0)  # passed it in line
    early = Run("stream", enqueued=9.5, started=10.2, finished=14.2)  # leased as it came
    r = bound_round(True, pair, [*stream, late, early], grace_s=5.0)
    assert (r.ran_between, r.passed) == (2, 1)


def test_the_share_counts_cards_times_seconds_while_both_compete() -> None:
    pairs = [Run("pairs", 0.0, 0.0, 10.0), Run("pairs", 0.0, 10.0, 20.0)]
    singles = [Run("singles", 0.0, 5.0, 15.0), Run("singles", 0.0, 15.0, 30.0)]
    s = share_round(pairs, singles)
    assert s.window_s == 15.0  # from 5 (both started) to 20 (the pairs ran out)
    assert (s.pairs_gpu_s, s.singles_gpu_s) == (30.0, 15.0)
    assert s.pairs_share == pytest.approx(2 / 3)
