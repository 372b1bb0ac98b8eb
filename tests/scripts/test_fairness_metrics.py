"""The fairness metrics of scripts/benchkit/fairness on small schedules computed by hand, and
their invariants on random valid schedules (hypothesis)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scripts.benchkit.fairness import metrics as m
from scripts.benchkit.fairness.analysis import first_release, verdicts
from scripts.benchkit.fairness.scenarios import SCENARIOS, Params, interleave, jobs
from tests.support import examples


def run(account: str, enqueued: float, started: float, finished: float, worker: str = "w1"):
    return m.Run(account, enqueued, started, finished, worker, finished - started)


# One worker, equal weights: A runs first for 2 s while B waits, then B runs 2 s.
A_THEN_B = [run("A", 0, 0, 2), run("B", 0, 2, 4)]


def test_segments_cut_the_run_at_every_timestamp() -> None:
    segs = m.segments(A_THEN_B)
    assert [(s.start, s.end) for s in segs] == [(0, 2), (2, 4)]
    assert segs[0].running == {"A": 1, "B": 0}
    assert segs[0].outstanding == {"A": 1, "B": 1}
    assert segs[0].waiting == 1
    assert segs[1].running == {"A": 0, "B": 1}
    assert segs[1].backlogged() == ["B"]
    assert segs[1].busy == 1


def test_a_waiting_account_is_owed_its_share_of_the_busy_worker() -> None:
    traces = m.lag_traces(A_THEN_B, {"A": 1, "B": 1})
    # [0, 2): each is owed 0.5/s; A gets 1/s, B nothing. [2, 4): B alone gets what it is owed.
    assert traces["A"].points == [(0, 0.0), (2, -1.0)]
    assert traces["B"].points == [(0, 0.0), (2, 1.0), (4, 1.0)]
    assert m.worst_lag(traces) == ("B", 1.0)


def test_lag_restarts_with_each_backlog_period() -> None:
    runs = [
        run("H", 0, 0, 1),
        run("L", 0, 1, 2),
        run("H", 0, 2, 3),
        run("L", 3, 3, 4),  # L was idle in [2, 3): a new period
    ]
    traces = m.lag_traces(runs, {"H": 1, "L": 1})
    assert traces["L"].points == [(0, 0.0), (1, 0.5), (2, 0.0), (3, 0.0), (4, 0.0)]
    assert traces["H"].points == [(0, 0.0), (1, -0.5), (2, 0.0), (3, 0.0)]
    assert m.worst_lag(traces) == ("L", 0.5)


WEIGHTED = [
    run("A", 0, 0, 1),
    run("A", 0, 1, 2),
    run("B", 0, 2, 3),
    run("A", 0, 3, 4),
]


def test_weights_split_the_owed_service() -> None:
    traces = m.lag_traces(WEIGHTED, {"A": 2, "B": 1})
    # [0, 2): A owed 2/3 per s, B 1/3, A runs; [2, 3): B runs; [3, 4): A alone.
    assert [p for _, p in traces["B"].points] == pytest.approx([0, 1 / 3, 2 / 3, 0])
    assert [p for _, p in traces["A"].points] == pytest.approx([0, -1 / 3, -2 / 3, 0, 0])
    account, worst = m.worst_lag(traces)
    assert account == "B"
    assert worst == pytest.approx(2 / 3)


def test_charged_lag_counts_what_a_job_asked_for_not_how_long_it_ran() -> None:
    overran = m.Run("A", 0, 0, 2, "w1", duration=1)  # asked 1 s, held the worker 2 s
    runs = [overran, m.Run("B", 0, 2, 3, "w1", duration=1)]
    assert overran.charge_rate == 0.5
    as_run = m.lag_traces(runs, {"A": 1, "B": 1})
    assert m.worst_lag(as_run) == ("B", 1.0)
    # [0, 2): capacity 0.5 (A's rate), B owed 0.25/s; [2, 3): B alone gets what it is owed
    charged = m.lag_traces(runs, {"A": 1, "B": 1}, charged=True)
    assert charged["B"].points == [(0, 0.0), (2, 0.5), (3, 0.5)]
    assert charged["A"].points == [(0, 0.0), (2, -0.5)]


def test_share_over_weight_counts_the_time_all_are_backlogged() -> None:
    share = m.share_over_weight(WEIGHTED, {"A": 2, "B": 1})
    assert share.window_s == 3  # B's job ends at 3
    assert share.ratios == {"A": pytest.approx(1.0), "B": pytest.approx(1.0)}
    unfair = m.share_over_weight(A_THEN_B, {"A": 1, "B": 1})
    assert unfair.ratios == {"A": 2.0, "B": 0.0}
    assert unfair.least == ("B", 0.0)


def test_share_without_a_common_window_is_nan() -> None:
    share = m.share_over_weight([run("A", 0, 0, 1), run("B", 2, 2, 3)], {"A": 1, "B": 1})
    assert share.window_s == 0
    assert share.least[0] == ""
    assert math.isnan(share.least[1])


def test_concurrency_allowance_is_workers_times_the_largest_fraction() -> None:
    assert m.concurrency_allowance(WEIGHTED, {"A": 2, "B": 1}, workers=1) == pytest.approx(2 / 3)
    assert m.concurrency_allowance(A_THEN_B, {"A": 1, "B": 1}, workers=2) == 1.0
    alone = [run("A", 0, 0, 1)]
    assert m.concurrency_allowance(alone, {"A": 1}, workers=2) == 0.0


# Two workers: b waits 0.5 s for w2, c waits for w1 to finish a and then 0.1 s more.
TWO_WORKERS = [
    run("A", 0, 0, 1, "w1"),
    run("B", 0, 0.5, 1.5, "w2"),
    run("C", 0, 1.1, 2, "w1"),
]


def test_idle_counts_idle_workers_while_a_job_waits() -> None:
    # [0, 0.5): one worker idle, b and c waiting; [1, 1.1): w1 idle while c waits.
    assert m.idle_while_waiting(TWO_WORKERS, workers=2) == pytest.approx(0.6)
    # [1.5, 2): w2 is idle too, but nothing waits then
    assert m.idle_while_waiting(TWO_WORKERS[:1], workers=2) == 0


def test_dispatch_gaps_are_the_pauses_with_work_waiting() -> None:
    assert m.dispatch_gaps(TWO_WORKERS) == [pytest.approx(0.1)]
    later = [run("A", 0, 0, 1), run("A", 3, 3, 4)]  # nothing waited at 1
    assert m.dispatch_gaps(later) == []


def test_ahead_counts_other_accounts_starting_in_between() -> None:
    light = run("L", 0.5, 2, 3)
    runs = [run("H", 0, 0.5, 1), run("H", 0, 1, 2), run("H", 0, 1.5, 2.5), run("L", 0, 1, 2)]
    assert m.ahead_of(light, [*runs, light]) == 2  # 1 and 1.5; not 0.5 (at its submit)


def test_first_release_is_the_submit_when_a_worker_is_free() -> None:
    job = run("L", 0.5, 1.2, 2)
    busy = [run("H", 0, 0, 1, "w1"), run("H", 0, 0, 1.2, "w2"), job]
    assert first_release(job, busy, workers=2) == 1
    assert first_release(job, busy, workers=3) == 0.5


def test_verdicts_check_the_scenarios_targets() -> None:
    scenario = SCENARIOS["weighted"](Params(scale=0.01))
    numbers = {
        "lag_bound_jobs": 2.0,
        "lag_allowance_jobs": 1.0,
        "worst_lag_jobs": 2.5,
        "worst_lag_account": "weighted-2",
        "longest_run_s": 0.2,
        "worst_charged_lag_jobs": 1.5,
        "worst_charged_lag_account": "weighted-5",
        "least_share_over_weight": 0.995,
        "least_share_account": "weighted-3",
        "idle_while_waiting_s": 0.0,
        "idle_per_job_ms": 0.0,
        "dispatch_gap_p50_ms": 0.0,
        "dispatch_gap_max_ms": 0.0,
    }
    met = {v.target.split(",")[-1].strip(): v.met for v in verdicts(scenario, numbers)}
    assert met == {
        "GPU-seconds as run": False,
        "as charged": True,
        "least share/weight >= 0.99": True,
        "zero idle GPU-seconds while jobs wait": True,
    }


def test_scenarios_keep_their_shapes() -> None:
    p = Params()
    skew = SCENARIOS["skew"](p)
    assert [len(s.jobs) for s in skew.streams] == [1000, 2]  # type: ignore[union-attr]
    assert SCENARIOS["weighted"](p).weights == {"weighted-5": 5, "weighted-3": 3, "weighted-2": 2}
    sybil = SCENARIOS["sybil"](p)
    assert {j.key for j in sybil.streams[0].jobs} == {  # type: ignore[union-attr]
        "sybil-many-key1",
        "sybil-many-key2",
        "sybil-many-key3",
        "sybil-honest-key1",
    }
    a, b = SCENARIOS["balanced"](p).accounts[:2]
    assert [j.account for j in interleave([jobs(a, 2, 1), jobs(b, 1, 1)])] == [
        a.name,
        b.name,
        a.name,
    ]


# --- invariants on random valid schedules -----------------------------------------------------

ACCOUNTS = ("A", "B", "C")
PROPERTY_EXAMPLES = examples(150)
slot = st.tuples(
    st.sampled_from(ACCOUNTS),
    st.integers(0, 3),  # pause before the job on its worker (tenths of a second)
    st.integers(1, 10),  # its length (tenths)
    st.integers(0, 20),  # how long it waited before it started (tenths)
)


@st.composite
def schedules(draw: st.DrawFn) -> tuple[list[m.Run], int]:
    """Jobs laid out on 1-3 workers, one at a time per worker; times in tenths of a second."""
    workers = draw(st.integers(1, 3))
    runs: list[m.Run] = []
    for w in range(workers):
        t = 0
        for account, pause, length, waited in draw(st.lists(slot, min_size=1, max_size=6)):
            start = t + pause
            t = start + length
            runs.append(m.Run(account, max(0, start - waited) / 10, start / 10, t / 10, f"w{w}"))
    return runs, workers


weights = st.fixed_dictionaries({a: st.sampled_from([1.0, 2.0, 3.0, 5.0]) for a in ACCOUNTS})


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(schedules(), st.sampled_from([1.0, 3.0]))
def test_one_account_never_lags(schedule: tuple[list[m.Run], int], weight: float) -> None:
    runs, _ = schedule
    alone = [replace(r, account="A") for r in runs]
    _, worst = m.worst_lag(m.lag_traces(alone, {"A": weight}))
    assert worst == pytest.approx(0, abs=1e-9)


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(schedules(), weights)
def test_charged_lag_is_the_lag_when_every_job_ran_what_it_asked(
    schedule: tuple[list[m.Run], int], w: dict[str, float]
) -> None:
    runs = [replace(r, duration=r.finished - r.started) for r in schedule[0]]
    as_run, charged = m.lag_traces(runs, w), m.lag_traces(runs, w, charged=True)
    for account, trace in as_run.items():
        assert [p for _, p in charged[account].points] == pytest.approx(
            [p for _, p in trace.points], abs=1e-9
        )


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(schedules(), weights)
def test_shares_weighted_by_weight_fractions_sum_to_one(
    schedule: tuple[list[m.Run], int], w: dict[str, float]
) -> None:
    runs, _ = schedule
    share = m.share_over_weight(runs, w)
    present = {r.account for r in runs}
    if share.ratios:
        total = sum(w[a] for a in present)
        assert sum(share.ratios[a] * w[a] / total for a in present) == pytest.approx(1)


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(schedules(), weights, st.sampled_from([0.5, 2.0, 10.0]))
def test_scaling_time_scales_lag_and_idle_but_not_shares(
    schedule: tuple[list[m.Run], int], w: dict[str, float], c: float
) -> None:
    runs, workers = schedule
    scaled = [
        replace(r, enqueued=r.enqueued * c, started=r.started * c, finished=r.finished * c)
        for r in runs
    ]
    assert m.worst_lag(m.lag_traces(scaled, w))[1] == pytest.approx(
        c * m.worst_lag(m.lag_traces(runs, w))[1], abs=1e-9
    )
    assert m.idle_while_waiting(scaled, workers) == pytest.approx(
        c * m.idle_while_waiting(runs, workers), abs=1e-9
    )
    assert m.share_over_weight(scaled, w).ratios == pytest.approx(
        m.share_over_weight(runs, w).ratios
    )


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(schedules())
def test_idle_is_bounded_by_the_workers_time(schedule: tuple[list[m.Run], int]) -> None:
    runs, workers = schedule
    span = max(r.finished for r in runs) - min(r.enqueued for r in runs)
    idle = m.idle_while_waiting(runs, workers)
    assert 0 <= idle <= workers * span + 1e-9
    assert all(g >= 0 for g in m.dispatch_gaps(runs))
