"""QueueGroup: the queues served together, their policy, and a call over all of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
import redis

from app.vtrr import FairQueue, Limits, QueueGroup, wake_together
from app.vtrr.step import Ending, step
from tests.vtrr.helpers import fill


class LastFirst:
    """A policy that tries the group's queues last one first, and notes what it was told."""

    def __init__(self, queues: Sequence[FairQueue]) -> None:
        self.queues = list(queues)
        self.heard: list[tuple[str | None, dict[str, int]]] = []

    def order(self, trigger: FairQueue) -> Sequence[FairQueue]:
        return self.queues[::-1]

    def took(self, queue: FairQueue | None, queued: Mapping[str, int]) -> None:
        self.heard.append((None if queue is None else queue.name, dict(queued)))


def test_a_queue_alone_orders_itself_and_finds_queues_by_name(r: redis.Redis) -> None:
    a, b = FairQueue(r, "a"), FairQueue(r, "b")
    alone = QueueGroup([a])
    assert alone.order(a) is alone  # no copy per step
    both = QueueGroup([a, b])
    assert both.order(b).queues == [b]
    assert (both.get("b"), both.get("c")) == (b, None)
    assert (both.index(a), both.index(b)) == (1, 2)
    assert both.with_queues(None, a) is both
    assert both.with_queues(FairQueue(r, "c")).queues[2].name == "c"
    with pytest.raises(ValueError, match="at least one queue"):
        QueueGroup([])


def test_the_policy_orders_the_step_and_hears_where_the_lease_came_from(r: redis.Redis) -> None:
    a, b = FairQueue(r, "a"), FairQueue(r, "b")
    policy = LastFirst([a, b])
    group = QueueGroup([a, b], policy)
    fill(a, "p", 1)
    fill(b, "p", 2)
    order = group.order(a)
    assert order.queues == [b, a] and group.order(b) is order  # one group per order
    stepped = step(order, consumes=a)
    assert group.took(stepped.queue, stepped.queued) is b
    ended = Ending(b, stepped.lease.task_id, stepped.lease.token) if stepped.lease else None
    after = step(group.order(a), ending=ended)
    assert group.took(after.queue, after.queued) is b
    assert policy.heard == [("b", {"b": 1, "a": 1}), ("b", {"b": 0, "a": 1})]
    assert b.pending() == 1 and b.stats()["acked"] == 1


def test_a_group_wakes_its_queues_as_wake_together_does(r: redis.Redis) -> None:
    a = FairQueue(r, "a", limits_group="g")
    b = FairQueue(r, "b", limits_group="g")
    for q in (a, b):
        q.set_limits("p", Limits(most_in_flight=1))
    fill(a, "p", 1)
    fill(b, "p", 1)
    lease = a.dequeue()
    assert lease is not None and b.dequeue() is None  # p holds its one, in a
    a.ack(lease.task_id, lease.token)
    assert QueueGroup([a, b]).wake().woken > 0  # freed in a: b's item may start
    assert wake_together([a, b]).woken == 0  # nothing more to wake
    assert b.dequeue() is not None
