"""Dropping a queue empties it but keeps its counters: what it has done stays counted, as a
monitoring counter must (issue 12, item 14)."""

from __future__ import annotations

import redis

from app.vtrr import FairQueue
from tests.vtrr.helpers import drain, fill, take


def test_a_dropped_queue_keeps_counting_from_where_it_was(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    ids = fill(q, "A", 3)
    lease = take(q)
    q.release(lease.task_id, lease.token)
    before = q.stats()
    assert (before["enqueued"], before["dequeued"], before["released"]) == (3, 1, 1)

    dropped = q.drop("jobs")
    assert (sorted(dropped.queued), dropped.in_flight) == (sorted(ids), [])
    assert (q.length(), q.pending()) == (0, 0)
    assert q.stats() == before

    fill(q, "B", 2)
    assert drain(q) == ["B0", "B1"]
    after = q.stats()
    assert after["enqueued"] == before["enqueued"] + 2
    assert after["acked"] == before["acked"] + 2
