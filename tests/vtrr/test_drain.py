"""Drain mode (app/vtrr/drain.py): one trigger's run takes item after item, each leased when the
worker frees and acked when it ends, until the queues are empty, DRAIN_MAX_S has passed or the
worker shuts down. Runs through `celery_task.apply()` in this process (tests/vtrr/test_decorator.py
explains the app); real workers drain in tests/vtrr/test_celery_worker.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, Task

from app.vtrr import VTRRQueue, drain
from tests.vtrr import test_decorator
from tests.vtrr.test_decorator import new_queue

app, broker = test_decorator.app, test_decorator.broker  # the fixtures, for these tests


@pytest.fixture
def ran() -> list[str]:
    return []


def runner(vtrr: VTRRQueue, ran: list[str], **options: Any) -> Any:
    """The queue's task: note each item's key, and the lease it ran under."""

    @vtrr.task(**options)
    def note(self: Task, key: str) -> str:
        ran.append(key)
        return key.upper()

    return note


def test_one_trigger_runs_every_queued_item_and_acks_each(
    r: redis.Redis, app: Celery, broker: redis.Redis, ran: list[str]
) -> None:
    vtrr = new_queue(r, app, max_concurrency=1)
    note = runner(vtrr, ran)
    note.queue("p", [{"args": [k]} for k in ("a", "b", "c")])
    assert broker.llen(vtrr.celery_queue) == 1  # one trigger: the cap

    result = note.celery_task.apply().get()

    assert ran == ["a", "b", "c"]
    assert result["result"] == "C" and len(result["drained"]) == 3  # the ids, shown by Flower
    assert (vtrr.length(), vtrr.pending(), vtrr.stats()["acked"]) == (0, 0, 3)


def test_each_item_is_leased_when_the_worker_frees_so_a_newcomer_is_served_fairly(
    r: redis.Redis, app: Celery, ran: list[str]
) -> None:
    vtrr = new_queue(r, app)

    @vtrr.task
    def note(self: Task, key: str) -> None:
        ran.append(key)
        if key == "a1":  # b's job arrives while a's first one runs
            note.queue("b", [{"args": ["b1"]}])

    note.queue("a", [{"args": [k]} for k in ("a1", "a2", "a3")])
    note.celery_task.apply()

    assert ran == ["a1", "b1", "a2", "a3"]  # not a's whole backlog first


def test_a_drain_stops_taking_items_after_drain_max_s_and_the_rest_keep_a_trigger(
    r: redis.Redis, app: Celery, broker: redis.Redis, ran: list[str]
) -> None:
    vtrr = new_queue(r, app, max_concurrency=1, drain_max_s=0.05)

    @vtrr.task
    def slow(self: Task, key: str) -> None:
        ran.append(key)
        deadline = time.monotonic() + 0.06
        while time.monotonic() < deadline:  # work that outlasts the drain's bound
            pass

    slow.queue("p", [{"args": [k]} for k in ("a", "b", "c")])
    broker.delete(vtrr.celery_queue)  # the trigger that apply() below stands for

    slow.celery_task.apply()

    assert ran == ["a"]
    assert (vtrr.length(), vtrr.pending()) == (2, 0)
    assert broker.llen(vtrr.celery_queue) == 1  # topped up: a worker will come for the rest


@pytest.mark.parametrize(
    "options",
    [{"drain_max_s": 0}, {"time_limit": 60}, {"soft_time_limit": 60}],
    ids=["drain_max_s=0", "time_limit", "soft_time_limit"],
)
def test_without_drain_a_trigger_runs_one_item(
    r: redis.Redis, app: Celery, ran: list[str], options: dict[str, Any]
) -> None:
    """A queue that does not drain, or a task whose time is limited (Celery's limits apply to a
    whole message, so one message runs one item and each item keeps its own limit)."""
    drain_max_s = options.pop("drain_max_s", drain.DRAIN_MAX_S)
    vtrr = new_queue(r, app, drain_max_s=drain_max_s)
    note = runner(vtrr, ran, **options)
    note.queue("p", [{"args": [k]} for k in ("a", "b")])

    assert note.celery_task.apply().get() == "A"

    assert (ran, vtrr.length(), vtrr.stats()["acked"]) == (["a"], 1, 1)


def test_an_app_wide_time_limit_also_keeps_one_item_per_trigger(
    r: redis.Redis, app: Celery, ran: list[str]
) -> None:
    app.conf.task_time_limit = 60
    vtrr = new_queue(r, app)
    note = runner(vtrr, ran)
    note.queue("p", [{"args": [k]} for k in ("a", "b")])
    note.celery_task.apply()
    assert ran == ["a"]


def test_an_item_that_raises_ends_the_drain_acked_and_the_rest_wait(
    r: redis.Redis, app: Celery, ran: list[str]
) -> None:
    vtrr = new_queue(r, app)

    @vtrr.task
    def fragile(self: Task, key: str) -> None:
        ran.append(key)
        if key == "b":
            raise ValueError("b fails")

    fragile.queue("p", [{"args": [k]} for k in ("a", "b", "c")])
    result = fragile.celery_task.apply()

    assert isinstance(result.result, ValueError)
    assert ran == ["a", "b"]
    assert (vtrr.length(), vtrr.pending(), vtrr.stats()["acked"]) == (1, 0, 2)


@pytest.fixture
def shutdown() -> Iterator[None]:
    """The worker's shutdown as its main process announces it."""
    drain._note_shutdown()
    yield
    drain._shutting_down.value = False


def test_a_worker_that_shuts_down_finishes_the_item_in_hand_and_stops(
    r: redis.Redis, app: Celery, ran: list[str], shutdown: None
) -> None:
    assert drain.shutting_down()
    vtrr = new_queue(r, app)
    note = runner(vtrr, ran)
    note.queue("p", [{"args": [k]} for k in ("a", "b")])

    note.celery_task.apply()

    assert (ran, vtrr.length(), vtrr.pending()) == (["a"], 1, 0)


def scripting_calls(r: redis.Redis) -> int:
    """The queue operations Redis has run since the last CONFIG RESETSTAT (FCALL on Redis 7,
    EVALSHA on 6.2), FUNCTION and SCRIPT LOAD left out."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("fcall", "evalsha"))


def test_a_drain_costs_one_queue_operation_per_item(
    r: redis.Redis, app: Celery, ran: list[str]
) -> None:
    """The step from one item to the next acks the first and leases the second in one call
    (ack_lease.lua): a drain of n items is one lease, then one call per item."""
    vtrr = new_queue(r, app)
    note = runner(vtrr, ran)
    note.queue("p", [{"args": [k]} for k in "abcde"])
    r.config_resetstat()

    note.celery_task.apply()

    assert ran == list("abcde")
    assert scripting_calls(r) == 1 + 5
    assert (vtrr.length(), vtrr.pending(), vtrr.stats()["acked"]) == (0, 0, 5)
