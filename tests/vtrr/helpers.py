"""Small helpers shared by the fair queue's tests."""

from __future__ import annotations

from app.vtrr import FairQueue, Item, Lease


def fill(q: FairQueue, partition: str, n: int, weight: int = 1) -> list[str]:
    """Queue n items of one partition whose payloads are '<partition><i>'; returns their ids."""
    return q.enqueue(partition, [Item(f"{partition}{i}", weight=weight) for i in range(n)])


def drain(q: FairQueue) -> list[str]:
    """Dequeue and ack until empty; the payloads in the order they were served."""
    served: list[str] = []
    while (lease := q.dequeue()) is not None:
        served.append(lease.payload)
        assert q.ack(lease.task_id, lease.token)
    return served


def take(q: FairQueue) -> Lease:
    """Dequeue one item that must be there."""
    lease = q.dequeue()
    assert lease is not None, "expected an item to be queued"
    return lease


def expire(q: FairQueue, lease: Lease) -> None:
    """Let a lease run out now, without waiting: its expiry moves to a microsecond from now."""
    assert q.extend(lease.task_id, lease.token, 1e-6)
