"""A run's asks (app/worker/stops.py RunAsks), against the suite's real Redis: whether a run
should stop or yield, and why, each reason known where it comes (the job's mark read once where
a stop is heard, the lease, the runner's hand-back) and named on the run's end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from app.store.keys import STOPS, YIELDS, ask_key, job_key
from app.worker.calls import Ended
from app.worker.end_reason import Why, asked_by
from app.worker.stops import Heard, RunAsks, StopListener
from tests.support import wait_for

JOB = "job-1"
A_LONG_BEAT = 3600.0  # no heartbeat look comes by itself within a test: only what is heard


@pytest.fixture
def listener(r: redis.Redis) -> Iterator[StopListener]:
    stops = StopListener(r)
    stops.start()
    yield stops
    stops.close()


def asks_of(
    r: redis.Redis, heard: Heard, *, lost: bool = False, every: float = A_LONG_BEAT
) -> RunAsks:
    return RunAsks(r, JOB, heard, lambda: lost, every, preemptible=True)


def published(r: redis.Redis, listener: StopListener, channel: str) -> RunAsks:
    """A run's asks once `channel` has carried the job's id to the listener."""
    heard = listener.watch(JOB)
    wait_for(lambda: r.pubsub_numsub(STOPS)[0][1] > 0, what="the listener subscribed")
    r.publish(channel, JOB)
    flag = heard.ask if channel == YIELDS else heard.stop
    wait_for(flag.is_set, what=f"a message on {channel} heard")
    return asks_of(r, heard)


def test_an_owners_cancel_heard_on_the_channel_stops_the_run_as_a_cancel(
    r: redis.Redis, listener: StopListener
) -> None:
    r.hset(job_key(JOB), "cancel", "owner")  # revoke.lua marks the job, then publishes
    asks = published(r, listener, STOPS)
    assert asks.should_stop() and asks.why is Why.CANCEL
    assert asks.named(Ended("cancelled", 1.0)).why is Why.CANCEL


def test_an_operators_stop_is_told_apart_from_a_cancel_where_it_is_heard(
    r: redis.Redis, listener: StopListener
) -> None:
    r.hset(job_key(JOB), "cancel", "operator")
    asks = published(r, listener, STOPS)
    assert asks.should_stop()
    r.hset(job_key(JOB), "cancel", "owner")  # read once, where heard: not again at the end
    assert asks.named(Ended("cancelled", 1.0)).why is Why.OPERATOR


def test_a_missed_message_is_caught_by_the_heartbeats_look_at_the_mark(r: redis.Redis) -> None:
    asks = asks_of(r, Heard(), every=0.01)
    assert not asks.should_stop()
    r.hset(job_key(JOB), "cancel", "owner")
    wait_for(asks.should_stop, what="the mark read at a heartbeat")
    assert asks.why is Why.CANCEL


def test_a_lost_lease_stops_the_run_as_a_lost_lease_unless_an_operator_took_it(
    r: redis.Redis,
) -> None:
    asks = asks_of(r, Heard(), lost=True)
    assert asks.should_stop() and asks.why is Why.LEASE_LOST
    r.hset(job_key(JOB), "cancel", "operator")  # a dropped queue takes the lease too
    dropped = asks_of(r, Heard(), lost=True)
    assert dropped.should_stop() and dropped.why is Why.OPERATOR


def test_a_hand_back_outranks_any_other_stop(r: redis.Redis, listener: StopListener) -> None:
    r.hset(job_key(JOB), "cancel", "owner")
    asks = published(r, listener, STOPS)
    assert asks.should_stop() and asks.why is Why.CANCEL
    asks.hand_back()
    assert asks.named(Ended("cancelled", 1.0)).why is Why.HAND_BACK
    idle = asks_of(r, Heard())
    assert not idle.should_stop()
    idle.hand_back()
    assert idle.should_stop() and idle.why is Why.HAND_BACK


def test_an_ask_to_yield_heard_names_the_job_owed_the_gpu(
    r: redis.Redis, listener: StopListener
) -> None:
    r.set(ask_key(JOB), "job-2 short")
    asks = published(r, listener, YIELDS)
    assert asks.should_yield() and asks.owed == ("job-2", "short")
    assert not asks.should_stop()  # an ask to yield is no stop
    assert asks.named(Ended("preempted", 1.0)).why is Why.YIELD


def test_an_ask_key_is_read_at_the_heartbeat_and_only_for_a_preemptible_run(
    r: redis.Redis,
) -> None:
    r.set(ask_key(JOB), "job-2 short")
    asks = asks_of(r, Heard(), every=0.01)
    wait_for(asks.should_yield, what="the ask key read at a heartbeat")
    assert asks.owed == ("job-2", "short")
    plain = RunAsks(r, JOB, Heard(), lambda: False, 0.01)
    assert not plain.should_yield()
    assert plain.named(Ended("preempted", 1.0)).why is None  # not asked: no yield


def test_a_run_not_asked_keeps_the_end_its_executor_named(r: redis.Redis) -> None:
    asks = asks_of(r, Heard())
    assert not asks.should_stop() and asks.why is None
    timeout = Ended("timeout", 2.0, why=Why.TIMEOUT)
    assert asks.named(timeout) == timeout
    assert asks.named(Ended("cancelled", 1.0)).why is Why.LEASE_LOST  # the old reading


@pytest.mark.parametrize(
    ("mark", "why"),
    [(None, None), (b"owner", Why.CANCEL), ("operator", Why.OPERATOR), (b"1", Why.CANCEL)],
)
def test_the_mark_says_whose_stop_it_is(mark: bytes | str | None, why: Why | None) -> None:
    assert asked_by(mark) is why  # a bare flag: an owner's cancel of an older release
