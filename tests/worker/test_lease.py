"""RunLease and the watchdog's time: a run's lease tells its executor by when the run must have
stopped (from the lease's or a renewal's sending time, less the margin), a lease found gone
stops it at once, and a run stopped for its lease is given up: its job back in line at once."""

from __future__ import annotations

import math
import multiprocessing
import subprocess
import time

import pytest
import redis

from app.settings import Settings
from app.vtrr import FairQueue, Item
from app.worker.calls import Ended
from app.worker.lease import LeaseLapsedError, RunLease
from app.worker.reaper import alive
from app.worker.watchdog import (
    LEASE_LAPSED_EXIT,
    MARGIN_S,
    Watchdog,
    margin_s,
    shared_deadline,
)
from tests.support import FIXTURES, wait_for


class Told:
    """An executor that notes by when it was told to stop."""

    def __init__(self) -> None:
        self.at: list[float] = []

    def must_stop_by(self, at: float) -> None:
        self.at.append(at)


def leased(r: redis.Redis, lease_seconds: float = 30.0) -> tuple[FairQueue, str]:
    q = FairQueue(r, "jobs", lease_seconds=lease_seconds)
    q.enqueue("A", [Item("x", id="J1")])
    lease = q.dequeue()
    assert lease is not None
    return q, lease.token


SETTINGS = Settings(users_file=FIXTURES, lease_seconds=30, heartbeat_seconds=10)


def test_the_margin_never_trips_a_heartbeat_that_keeps_up() -> None:
    assert margin_s(30, 10) == MARGIN_S
    assert margin_s(2.0, 0.5) == 0.75  # half the time a renewal may come late


def test_the_run_must_stop_a_lease_less_the_margin_after_the_call_that_leased_it(
    r: redis.Redis,
) -> None:
    q, token = leased(r)
    told = Told()
    lease = RunLease(q, "J1", token, SETTINGS, told)
    lease.start(leased_at=100.0)
    assert told.at == [100.0 + 30 - MARGIN_S]
    lease.renewed(110.0)  # the heartbeat's renewal, sent at 110
    assert told.at[-1] == 110.0 + 30 - MARGIN_S
    lease.renewed(105.0)  # told late: the latest renewal counts
    assert told.at[-1] == 110.0 + 30 - MARGIN_S


def test_where_the_lease_s_time_is_not_known_it_is_renewed_at_the_start(
    r: redis.Redis,
) -> None:
    q, token = leased(r)
    told = Told()
    before = time.monotonic()
    RunLease(q, "J1", token, SETTINGS, told).start(leased_at=None)
    assert before + 30 - MARGIN_S <= told.at[0] <= time.monotonic() + 30 - MARGIN_S


def test_a_lease_found_gone_stops_the_run_at_once(r: redis.Redis) -> None:
    q, _ = leased(r)
    told = Told()
    lease = RunLease(q, "J1", "another-run-s", SETTINGS, told)
    lease.start(leased_at=None)
    assert told.at == [-math.inf] and lease.lapsed()


def test_a_run_stopped_for_its_lease_is_given_up_and_its_item_reclaimed(r: redis.Redis) -> None:
    q, token = leased(r)
    lease = RunLease(q, "J1", token, SETTINGS, Told())
    lease.start(leased_at=time.monotonic() - 60)  # its worker was frozen past the lease
    lease.check(Ended("success", 1.0))  # a run that ended by itself is its end, not a loss
    assert q.pending() == 1
    with pytest.raises(LeaseLapsedError):
        lease.check(Ended("crashed", 1.0))
    assert (q.pending(), q.length(), q.stats()["reclaimed"]) == (0, 1, 1)
    assert not q.ack("J1", token)  # the step's ack after it is fenced off


def test_a_crash_before_the_time_is_a_crash(r: redis.Redis) -> None:
    q, token = leased(r)
    lease = RunLease(q, "J1", token, SETTINGS, Told())
    lease.start(leased_at=time.monotonic())
    lease.check(Ended("crashed", 1.0))  # no LeaseLapsedError: the run's own crash
    assert q.pending() == 1


def _watched_child(deadline: object, pids: object) -> None:
    """A job child whose job started a process, running past its lease's time."""
    sleeper = subprocess.Popen(["sleep", "60"])
    pids.value = sleeper.pid  # type: ignore[attr-defined]
    watch = Watchdog(deadline)
    watch.running = True  # a job runs
    watch.start()
    time.sleep(60)  # the job's work: only the watchdog ends it


def test_the_watchdog_kills_the_job_s_processes_and_its_child_once_the_time_has_passed() -> None:
    context = multiprocessing.get_context("spawn")
    deadline = shared_deadline(context)
    pids = context.RawValue("i", 0)
    child = context.Process(target=_watched_child, args=(deadline, pids))
    child.start()
    wait_for(lambda: pids.value, what="the job's process")
    deadline.value = time.monotonic()  # the lease could not be renewed: its time is now
    child.join(timeout=30)
    assert child.exitcode == LEASE_LAPSED_EXIT
    assert not alive(pids.value)
