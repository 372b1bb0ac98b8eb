"""app.api.live.eta: how long a queued job should wait, from the declared work ahead of it, when
each worker of its queue is free again, and what a worker serving both queues runs in between."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.api.live.eta import Line, Worker, wait_s, work_ahead_s
from tests.support import examples

#: Hypothesis's default in a whole run; the unit tier generates its share (tests/support.py).
PROPERTY_EXAMPLES = examples(100)

positions = st.integers(min_value=0, max_value=200)
free_times = st.lists(
    st.floats(min_value=-100, max_value=1000, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=8,
)
means = st.floats(min_value=0.01, max_value=500, allow_nan=False, allow_infinity=False)
lines = st.builds(
    Line,
    st.integers(min_value=0, max_value=50),
    st.floats(min_value=0, max_value=5000, allow_nan=False),
)
kinds = st.sampled_from(["short", "long"])
everies = st.integers(min_value=1, max_value=8)
NOBODY = Line()


def dedicated(position: int, free_in_s: list[float], mean_s: float) -> float | None:
    """The estimate for workers of this queue only, each job ahead `mean_s` long."""
    return wait_s("short", position, position * mean_s, [Worker(f) for f in free_in_s], NOBODY, 4)


def greedy_start(position: int, free_in_s: list[float], mean_s: float) -> float:
    """The model the module describes for dedicated workers, played out: the jobs ahead, in
    order, each go to the worker free first and keep it one mean run."""
    free = [max(0.0, s) for s in free_in_s]
    heapq.heapify(free)
    for _ in range(position):
        heapq.heappush(free, heapq.heappop(free) + mean_s)
    return free[0]


def at_most(a: float, b: float) -> bool:
    return a <= b or a == pytest.approx(b)


def test_without_a_worker_there_is_no_estimate() -> None:
    assert wait_s("short", 0, 0, [], NOBODY, 4) is None
    assert wait_s("long", 7, 70, [], NOBODY, 4) is None


def test_a_job_starts_at_once_while_a_worker_is_free() -> None:
    assert dedicated(0, [0.0, 5.0, 0.0], 10) == 0
    assert dedicated(1, [0.0, 5.0, 0.0], 10) == 0
    assert dedicated(2, [0.0, 5.0, 0.0], 10) == 5


def test_idle_workers_take_the_line_in_rounds_of_the_worker_count() -> None:
    assert [dedicated(p, [0.0, 0.0], 10) for p in range(6)] == [0, 0, 10, 10, 20, 20]


def test_busy_workers_are_taken_in_the_order_they_free_up() -> None:
    assert [dedicated(p, [7.0, 3.0], 10) for p in range(4)] == [3, 7, 13, 17]


def test_the_work_ahead_is_the_position_times_the_mean_of_the_other_jobs_queued() -> None:
    # 20 one-second jobs ahead of a 60 s one: 20 s ahead, whatever ran before.
    assert work_ahead_s(20, Line(21, 20 * 1.0 + 60), own_s=60) == pytest.approx(20)
    assert work_ahead_s(0, Line(21, 80), own_s=60) == 0
    assert work_ahead_s(3, Line(1, 60), own_s=60) == 0


def test_a_burst_of_tiny_jobs_ahead_counts_as_tiny_jobs() -> None:
    ahead = work_ahead_s(100, Line(101, 100 * 1.0 + 50), own_s=50)
    assert wait_s("short", 100, ahead, [Worker(0.0)], NOBODY, 4) == pytest.approx(100)


def test_a_short_job_on_a_shared_worker_waits_for_the_long_jobs_it_lets_through() -> None:
    longs = Line(2, 2 * 600.0)
    alone = wait_s("short", 6, 6.0, [Worker(0.0)], longs, 4)
    shared = wait_s("short", 6, 6.0, [Worker(0.0, shared=True)], longs, 4)
    assert (alone, shared) == (6, 6 + 2 * 600)  # shorts 0-2, long, 3-5, long, then this one
    assert wait_s("short", 2, 2.0, [Worker(0.0, shared=True)], longs, 4) == 2  # none yet


def test_a_long_job_on_a_shared_worker_waits_behind_short_ones_until_its_turn() -> None:
    shorts = Line(10, 10.0)
    assert wait_s("long", 0, 0.0, [Worker(0.0)], shorts, 4) == 0
    assert wait_s("long", 0, 0.0, [Worker(0.0, shared=True)], shorts, 4) == 3  # 3 shorts first
    assert wait_s("long", 0, 0.0, [Worker(0.0, shared=True)], shorts, 1) == 0  # long every time


@settings(max_examples=PROPERTY_EXAMPLES)
@given(positions, free_times, means)
@example(position=1, free_in_s=[0.0, 100.0], mean_s=10.0)
@example(position=2, free_in_s=[0.0, 30.0, 0.0], mean_s=10.0)
def test_on_dedicated_workers_the_estimate_is_the_greedy_start(
    position: int, free_in_s: list[float], mean_s: float
) -> None:
    got = dedicated(position, free_in_s, mean_s)
    assert got == pytest.approx(greedy_start(position, free_in_s, mean_s))


@settings(max_examples=PROPERTY_EXAMPLES)
@given(kinds, positions, means, free_times, st.lists(st.booleans(), min_size=8), lines, everies)
def test_the_wait_never_shrinks_further_back_in_line(
    kind: str,
    position: int,
    mean_s: float,
    free: list[float],
    shared: list[bool],
    other: Line,
    every: int,
) -> None:
    workers = [Worker(f, s) for f, s in zip(free, shared, strict=False)]
    here = wait_s(kind, position, position * mean_s, workers, other, every)  # type: ignore[arg-type]
    behind = wait_s(kind, position + 1, (position + 1) * mean_s, workers, other, every)  # type: ignore[arg-type]
    assert here is not None and behind is not None
    assert here >= 0
    assert at_most(here, behind)


@settings(max_examples=PROPERTY_EXAMPLES)
@given(kinds, positions, means, free_times, lines, everies)
def test_a_shared_worker_never_starts_a_job_sooner_than_a_dedicated_one(
    kind: str, position: int, mean_s: float, free: list[float], other: Line, every: int
) -> None:
    ahead = position * mean_s
    alone = wait_s(kind, position, ahead, [Worker(f) for f in free], other, every)  # type: ignore[arg-type]
    shared = wait_s(kind, position, ahead, [Worker(f, True) for f in free], other, every)  # type: ignore[arg-type]
    assert alone is not None and shared is not None
    assert at_most(alone, shared)


@settings(max_examples=PROPERTY_EXAMPLES)
@given(positions, free_times, means, st.floats(min_value=-100, max_value=1000))
@example(position=1, free_in_s=[0.0], mean_s=10.0, extra=100.0)
def test_the_wait_never_grows_with_one_more_worker(
    position: int, free_in_s: list[float], mean_s: float, extra: float
) -> None:
    fewer = dedicated(position, free_in_s, mean_s)
    more = dedicated(position, [*free_in_s, extra], mean_s)
    assert fewer is not None and more is not None
    assert at_most(more, fewer)


@settings(max_examples=PROPERTY_EXAMPLES)
@given(positions, st.integers(min_value=1, max_value=8), means)
def test_with_every_worker_idle_the_wait_is_whole_rounds(
    position: int, workers: int, mean_s: float
) -> None:
    got = dedicated(position, [0.0] * workers, mean_s)
    assert got == pytest.approx((position // workers) * mean_s)
