"""A worker serving both queues: short before long, long one dispatch in LONG_EVERY while both
wait, each queue's fair order kept, and every trigger counted in its own queue.

The service's job tasks run in this process on a real Redis through `celery_task.apply()`, as a
worker runs a trigger it took from the broker; which queue's trigger arrives is the test's
choice, since Kombu may hand the worker either.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from app.models import Kind
from app.wiring.short_first import order
from tests.worker.support import BOB, Worker


def triggers(r: redis.Redis, kind: Kind) -> int:
    return int(r.get(f"vtrr:{{{kind}}}:triggers") or 0)


def test_a_waiting_short_job_goes_before_a_waiting_long_one_whichever_trigger_arrives(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker()
    w.submit(r, "long", "L1")
    w.submit(r, "short", "S1")
    w.trigger("long")  # the long queue's trigger: it still runs the short job
    w.trigger("long")
    assert w.ran == ["S1", "L1"]
    assert all(w.service.queues[k].pending() == 0 for k in ("short", "long"))  # both acked


@pytest.mark.parametrize("long_every", [1, 2, 4])
def test_while_both_wait_long_gets_one_dispatch_in_long_every(
    worker: Callable[..., Worker], r: redis.Redis, long_every: int
) -> None:
    w = worker(long_every=long_every)
    for i in range(3):
        w.submit(r, "long", f"L{i}")
    for i in range(10):
        w.submit(r, "short", f"S{i}")
    for n in range(13):
        w.trigger("short" if n % 2 else "long")  # Kombu's round robin between the queues
    kinds = "".join(name[0] for name in w.ran)
    expected = {1: "LLLSSSSSSSSSS", 2: "SLSLSLSSSSSSS", 4: "SSSLSSSLSSSLS"}[long_every]
    assert kinds == expected
    assert sorted(w.ran) == sorted([f"L{i}" for i in range(3)] + [f"S{i}" for i in range(10)])


@pytest.mark.parametrize("long_every", [1, 2, 4])
def test_a_drain_dispatches_in_the_same_order_as_one_trigger_per_job(
    worker: Callable[..., Worker], r: redis.Redis, long_every: int
) -> None:
    """Drain mode leases each job when the worker frees, with the same policy: one trigger's
    run goes through both queues in the order that thirteen triggers would have."""
    w = worker(long_every=long_every, drain=True)
    for i in range(3):
        w.submit(r, "long", f"L{i}")
    for i in range(10):
        w.submit(r, "short", f"S{i}")
    w.trigger("long")
    kinds = "".join(name[0] for name in w.ran)
    assert kinds == {1: "LLLSSSSSSSSSS", 2: "SLSLSLSSSSSSS", 4: "SSSLSSSLSSSLS"}[long_every]
    assert all(w.service.queues[k].pending() == 0 for k in ("short", "long"))  # each acked


def test_shorts_that_ran_while_no_long_waited_do_not_count_towards_long_s_turn(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker()
    for i in range(5):
        w.submit(r, "short", f"S{i}")
    w.trigger("short")
    w.trigger("short")  # two shorts ran with no long waiting
    w.submit(r, "long", "L0")
    for _ in range(4):
        w.trigger("long")
    assert w.ran == ["S0", "S1", "S2", "S3", "S4", "L0"]


def test_within_each_queue_the_fair_order_between_accounts_holds(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker()
    for i in range(3):
        w.submit(r, "long", f"La{i}")
    w.submit(r, "long", "Lb0", owner=BOB)
    for i in range(3):
        w.submit(r, "short", f"Sa{i}")
    w.submit(r, "short", "Sb0", owner=BOB)
    for _ in range(8):
        w.trigger("long")
    assert [n for n in w.ran if n[0] == "S"] == ["Sa0", "Sb0", "Sa1", "Sa2"]
    assert [n for n in w.ran if n[0] == "L"] == ["La0", "Lb0", "La1", "La2"]


def test_a_worker_serving_one_queue_runs_only_that_queue(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker(queues="long")
    w.submit(r, "long", "L1")
    w.submit(r, "short", "S1")
    w.trigger("long")
    w.trigger("long")
    assert w.ran == ["L1"]
    assert w.service.queues["short"].length() == 1


def test_each_trigger_is_counted_in_its_own_queue_whatever_it_ran(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    """Each queue's count stays the triggers its broker queue holds, so reclaim_and_dispatch's
    top-up from the broker's depth stays right, and no queued job is left without one."""
    w = worker()
    w.submit(r, "short", "S1")
    w.submit(r, "long", "L1")
    w.submit(r, "long", "L2")
    assert (triggers(r, "short"), triggers(r, "long")) == (1, 2)
    w.trigger("long")  # runs S1: long's trigger is spent, long tops up for its 2 queued jobs
    assert w.ran == ["S1"]
    assert (triggers(r, "short"), triggers(r, "long")) == (1, 2)
    w.trigger("short")  # runs L1 (no short waits): short's last trigger is spent
    assert w.ran == ["S1", "L1"]
    assert (triggers(r, "short"), triggers(r, "long")) == (0, 2)
    w.trigger("long")  # L2
    w.trigger("long")  # finds nothing: a no-op that is still counted
    assert w.ran == ["S1", "L1", "L2"]
    assert (triggers(r, "short"), triggers(r, "long")) == (0, 0)


@pytest.mark.parametrize(
    ("short", "long", "passed", "every", "runs"),
    [
        (True, True, 0, 4, "short"),
        (True, True, 2, 4, "short"),
        (True, True, 3, 4, "long"),
        (True, False, 9, 4, "short"),
        (False, True, 0, 4, "long"),
        (True, True, 0, 1, "long"),
        (False, False, 0, 4, None),
    ],
)
def test_the_order_prefers_short_until_long_is_due(
    short: bool, long: bool, passed: int, every: int, runs: str | None
) -> None:
    waiting = {"short": short, "long": long}
    assert next((kind for kind in order(passed, every) if waiting[kind]), None) == runs
