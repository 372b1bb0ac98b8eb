"""The wait before the dev stack restarts a process that died: Docker's policy."""

from __future__ import annotations

from app.dev.supervisor import Backoff


def test_a_crash_loop_waits_twice_as_long_each_time_up_to_the_cap() -> None:
    backoff = Backoff(first_s=0.5, max_s=4.0, steady_s=10.0)
    assert [backoff.after_death(ran_s=1.0) for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_process_that_ran_steadily_is_restarted_at_once_again() -> None:
    backoff = Backoff(first_s=0.5, max_s=30.0, steady_s=10.0)
    for _ in range(4):
        backoff.after_death(ran_s=0.1)
    assert backoff.after_death(ran_s=10.0) == 0.5
    assert backoff.after_death(ran_s=0.1) == 1.0
