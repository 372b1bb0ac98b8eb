"""RedisQueue: redq's reliable FIFO, as one partition of the fair queue engine.

With safemode (the default) `get` leases an item until `task_done`; with gc, leases older than
`ttl` seconds go back to the front of the line. A delivered task's `taskid` names both the item
and its lease ("<item id>:<token>"), so a worker whose lease was taken back cannot finish or
reset the item that someone else now holds.
"""

from __future__ import annotations

import json
import time
from typing import Any, NamedTuple

from redis import Redis

from app.vtrr.item import Item, Lease
from app.vtrr.queue import FairQueue

PARTITION = "fifo"
WAKE_POLL_S = 1.0  # a blocked get also looks again this often, to see reclaimed and reset items


class Task(NamedTuple):
    """A delivered item: its value and the id to pass to task_done or task_reset."""

    task: Any
    taskid: str


class RedisQueue:
    """A plain reliable FIFO with redq's method names, built on FairQueue."""

    def __init__(
        self,
        redis_client: Redis,
        name: str = "redq",
        ttl: float = 900,
        safemode: bool = True,
        gc: bool = True,
    ) -> None:
        self.name = name
        self.safemode = safemode
        self._redis = redis_client
        self._queue = FairQueue(
            redis_client,
            name,
            lease_seconds=ttl,
            reclaim_to="front",
            reclaim_on_dequeue=gc,
            wake_on_enqueue=True,
        )

    def put(self, task: Any) -> str:
        """Put a JSON-serialisable value at the rear; returns its item id."""
        return self._queue.enqueue(PARTITION, [Item(json.dumps(task))])[0]

    def put_first(self, task: Any) -> str:
        """Put a value at the front, ahead of everything queued; returns its item id."""
        return self._queue.enqueue(PARTITION, [Item(json.dumps(task))], front=True)[0]

    def get(self, blocking: bool = False, timeout: float | None = None) -> Task | None:
        """Take the item at the front, or None; blocking waits up to timeout (None: forever)."""
        return self._get(from_rear=False, blocking=blocking, timeout=timeout)

    def get_last(self, blocking: bool = False, timeout: float | None = None) -> Task | None:
        """Take the item at the rear, or None; blocking as for get."""
        return self._get(from_rear=True, blocking=blocking, timeout=timeout)

    def task_done(self, taskid: str) -> str | None:
        """Finish a delivered task; returns its taskid, or None when its lease is no longer held."""
        if not self.safemode:
            return taskid
        item_id, token = _split(taskid)
        return taskid if self._queue.ack(item_id, token) else None

    def task_reset(self, taskid: str) -> bool:
        """Put a delivered task back at the front for another worker; False when not held."""
        if not self.safemode:
            return False
        return self._queue.release(*_split(taskid))

    def length(self) -> int:
        """Items waiting."""
        return self._queue.length()

    def position(self, taskid: str) -> int | None:
        """0-based place in line of a waiting item, or None."""
        return self._queue.position(taskid.partition(":")[0])

    def promote(self, taskid: str) -> bool:
        """Move a waiting item to the front; False when it is not waiting."""
        return self._queue.promote(taskid.partition(":")[0])

    def pending(self) -> int:
        """Items delivered and not yet done (always 0 without safemode)."""
        return self._queue.pending()

    def drop(self, qname: str) -> None:
        """Delete the whole queue; qname must repeat its name."""
        self._queue.drop(qname)

    def _get(self, *, from_rear: bool, blocking: bool, timeout: float | None) -> Task | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            lease = self._queue.dequeue(from_rear=from_rear)
            if lease is not None:
                return self._deliver(lease)
            if not blocking:
                return None
            wait = (
                WAKE_POLL_S if deadline is None else min(WAKE_POLL_S, deadline - time.monotonic())
            )
            if wait <= 0:
                return None
            self._redis.blpop([self._queue.keys.wake], timeout=wait)

    def _deliver(self, lease: Lease) -> Task:
        value = json.loads(lease.payload)
        if not self.safemode:
            self._queue.ack(lease.task_id, lease.token)
            return Task(value, lease.task_id)
        return Task(value, f"{lease.task_id}:{lease.token}")


def _split(taskid: str) -> tuple[str, str]:
    item_id, _, token = taskid.partition(":")
    return item_id, token
