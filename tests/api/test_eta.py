"""app.eta.wait_s: how long a queued job should wait, from its place in line, when each worker
of its queue is free again, and the queue's mean run time."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from app.api.live.eta import wait_s

positions = st.integers(min_value=0, max_value=200)
free_times = st.lists(
    st.floats(min_value=-100, max_value=1000, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=8,
)
means = st.floats(min_value=0.01, max_value=500, allow_nan=False, allow_infinity=False)


def greedy_start(position: int, free_in_s: list[float], mean_run_s: float) -> float:
    """The model the module describes, played out: the jobs ahead, in order, each go to the
    worker free first and keep it one mean run."""
    free = [max(0.0, s) for s in free_in_s]
    heapq.heapify(free)
    for _ in range(position):
        heapq.heappush(free, heapq.heappop(free) + mean_run_s)
    return free[0]


def at_most(a: float, b: float) -> bool:
    """a <= b up to the rounding of a start time: starts a float's last digits apart (a worker
    free in 1e-125 s and one free now) are the same start to the estimate."""
    return a <= b or a == pytest.approx(b)


def test_without_a_worker_there_is_no_estimate() -> None:
    assert wait_s(0, [], mean_run_s=10) is None
    assert wait_s(7, [], mean_run_s=10) is None


def test_a_job_starts_at_once_while_a_worker_is_free() -> None:
    # Two idle workers and one free in 5 s: the first two in line start now.
    assert wait_s(0, [0.0, 5.0, 0.0], mean_run_s=10) == 0
    assert wait_s(1, [0.0, 5.0, 0.0], mean_run_s=10) == 0
    assert wait_s(2, [0.0, 5.0, 0.0], mean_run_s=10) == 5


def test_a_worker_past_its_jobs_asked_time_counts_as_free_now() -> None:
    assert wait_s(0, [-5.0], mean_run_s=10) == 0
    assert wait_s(1, [-5.0], mean_run_s=10) == 10


def test_idle_workers_take_the_line_in_rounds_of_the_worker_count() -> None:
    waits = [wait_s(p, [0.0, 0.0], mean_run_s=10) for p in range(6)]
    assert waits == [0, 0, 10, 10, 20, 20]


def test_busy_workers_are_taken_in_the_order_they_free_up() -> None:
    waits = [wait_s(p, [7.0, 3.0], mean_run_s=10) for p in range(4)]
    assert waits == [3, 7, 13, 17]


@pytest.mark.parametrize("position", range(6))
def test_the_estimate_is_the_greedy_start_when_workers_free_up_close_together(
    position: int,
) -> None:
    free = [4.0, 0.0, 9.0]  # within one mean run of each other
    assert wait_s(position, free, 10) == pytest.approx(greedy_start(position, free, 10))


@given(positions, free_times, means)
@example(position=1, free_in_s=[0.0, 100.0], mean_run_s=10.0)
@example(position=2, free_in_s=[0.0, 30.0, 0.0], mean_run_s=10.0)  # 30 s, not 10 s
def test_the_estimate_is_the_greedy_start_the_module_describes(
    position: int, free_in_s: list[float], mean_run_s: float
) -> None:
    got = wait_s(position, free_in_s, mean_run_s)
    assert got == pytest.approx(greedy_start(position, free_in_s, mean_run_s))


@given(positions, free_times, means)
@example(position=1, free_in_s=[0.0, 100.0], mean_run_s=10.0)
def test_the_wait_never_shrinks_further_back_in_line(
    position: int, free_in_s: list[float], mean_run_s: float
) -> None:
    here = wait_s(position, free_in_s, mean_run_s)
    behind = wait_s(position + 1, free_in_s, mean_run_s)
    assert here is not None and behind is not None
    assert here >= 0
    assert at_most(here, behind)


@given(positions, free_times, means, st.floats(min_value=-100, max_value=1000))
@example(position=1, free_in_s=[0.0], mean_run_s=10.0, extra=100.0)
@example(position=0, free_in_s=[0.0], mean_run_s=1.0, extra=1e-125)  # closer than bisection sees
def test_the_wait_never_grows_with_one_more_worker(
    position: int, free_in_s: list[float], mean_run_s: float, extra: float
) -> None:
    fewer = wait_s(position, free_in_s, mean_run_s)
    more = wait_s(position, [*free_in_s, extra], mean_run_s)
    assert fewer is not None and more is not None
    assert at_most(more, fewer)


@given(positions, st.integers(min_value=1, max_value=8), means)
def test_with_every_worker_idle_the_wait_is_whole_rounds(
    position: int, workers: int, mean_run_s: float
) -> None:
    got = wait_s(position, [0.0] * workers, mean_run_s)
    assert got == pytest.approx((position // workers) * mean_run_s)
    assert got == pytest.approx(greedy_start(position, [0.0] * workers, mean_run_s))


@given(positions, free_times, means)
def test_the_wait_is_never_negative(
    position: int, free_in_s: list[float], mean_run_s: float
) -> None:
    got = wait_s(position, free_in_s, mean_run_s)
    assert got is not None and got >= 0
