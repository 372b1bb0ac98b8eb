"""FairQueue.queued_weight: the running sum of the queued items' weights, kept by the scripts
through every way an item enters or leaves the queue."""

from __future__ import annotations

import redis

from app.vtrr import FairQueue, Item
from tests.vtrr.helpers import expire, take


def test_the_sum_follows_every_way_in_and_out_of_the_queue(r: redis.Redis) -> None:
    q = FairQueue(r, "weights", shares={"b": 2.0})
    q.enqueue("a", [Item("a1", weight=3), Item("a2", weight=5)])
    q.enqueue("b", [Item("b1", id="b1", weight=7)])  # a share does not change the weight
    assert q.queued_weight() == 15
    first = take(q)  # a1
    assert q.queued_weight() == 12
    assert q.cancel("b1")
    assert q.queued_weight() == 5
    expire(q, first)
    assert q.reclaim() == 1  # back in line, weighing again
    assert q.queued_weight() == 8
    lease = take(q)
    assert q.release(lease.task_id, lease.token)
    assert q.queued_weight() == 8
    while (lease := q.dequeue()) is not None:
        q.ack(lease.task_id, lease.token)
    assert q.queued_weight() == 0
    assert not r.exists(q.keys.queued_weight)  # drained: the key goes with the clock
