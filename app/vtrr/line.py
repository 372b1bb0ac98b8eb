"""QueueLine: a fair queue's line as seen and tended off the hot path (FairQueue is one): where
an item stands and whether it is here, how many wait or are in flight, the counters, a
partition's share, an operator's cancel, promote and drop (the operations of redq's queue,
which RedisQueue offers), and the operators' reads over a window of the line (inspection.py).
Each is one Lua call or plain reads of the queue's keys; none leases or acks."""

from __future__ import annotations

from typing import Any

from redis import Redis

from app.vtrr.errors import DropRefusedError
from app.vtrr.inspection import LAG_WINDOW, read_fairness_lag, read_head, read_top_partitions
from app.vtrr.item import Dropped, Shares, share_of
from app.vtrr.keys import Keys
from app.vtrr.scripts import Scripts
from app.vtrr.wire import as_text, rank_of, ranks_of, stats_of


class QueueLine:
    """The reads and an operator's changes of one queue's line (see the module's text)."""

    name: str
    redis: Redis
    keys: Keys
    scripts: Scripts
    _shares: Shares | None

    def share(self, partition_key: str) -> float:
        """The partition's share of service (default 1): a positive, finite number."""
        return share_of(self._shares, partition_key)

    def cancel(self, task_id: str) -> bool:
        """Remove a queued item; False when it is not queued (in flight, finished or unknown)."""
        return bool(self.scripts.run("cancel", task_id))

    def position(self, task_id: str) -> int | None:
        """The item's 0-based place in dispatch order, or None when it is not queued."""
        return rank_of(self.scripts.run("position", task_id))

    def positions(self, task_ids: list[str]) -> list[int | None]:
        """The places of many items in one call (None for one not queued)."""
        return ranks_of(self.scripts.run("positions", *task_ids) if task_ids else [])

    def promote(self, task_id: str) -> bool:
        """Move a queued item ahead of every other; False when it is not queued."""
        return bool(self.scripts.run("promote", task_id))

    def has(self, task_id: str) -> bool:
        """Whether the item is here: queued or in flight."""
        return bool(self.redis.exists(self.keys.item_key(task_id)))

    def length(self) -> int:
        """How many items are queued (not counting those in flight), held back by their
        partition's limits or not."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.zcard(self.keys.queue)
            pipe.get(self.keys.parked)
            pipe.smembers(self.keys.pools)
            queued, parked, pools = pipe.execute()
        return int(queued) + int(parked or 0) + self._pooled(pools)

    def _pooled(self, pools: set[Any]) -> int:
        """How many items wait in the lines of these pools (pool.py): one more round trip, only
        where a queue has any."""
        if not pools:
            return 0
        with self.redis.pipeline(transaction=False) as pipe:
            for line in (self.keys.pool_line(as_text(p)) for p in pools):
                pipe.zcard(line)
            return sum(int(n) for n in pipe.execute())

    def pending(self) -> int:
        """How many items are in flight (leased and not yet acked)."""
        return int(self.redis.zcard(self.keys.inflight))

    def expiry(self, task_id: str) -> float | None:
        """When the item's lease expires (Redis TIME, seconds), or None when it is not in flight."""
        score = self.redis.zscore(self.keys.inflight, task_id)
        return None if score is None else score / 1_000_000

    def queued_weight(self) -> int:
        """The sum of the weights of the items queued, kept as a running sum (O(1))."""
        return int(self.redis.get(self.keys.queued_weight) or 0)

    def stats(self) -> dict[str, int]:
        """Counters since the queue was created (a drop keeps them): enqueued, dequeued, ...
        Dequeue and ack, the hot path, count nothing: what they did follows from the other
        counters and the queue's two lengths, read together (see stats_of)."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(self.keys.stats)
            pipe.zcard(self.keys.queue)
            pipe.get(self.keys.parked)
            pipe.zcard(self.keys.inflight)
            pipe.smembers(self.keys.pools)
            raw, queued, parked, in_flight, pools = pipe.execute()
        return stats_of(raw, int(queued) + int(parked or 0) + self._pooled(pools), in_flight)

    def drop(self, confirm: str) -> Dropped:
        """Delete every key of this queue but its counters; confirm must repeat the queue's name.
        Returns the ids it held, so that whoever waits for them can be told."""
        if confirm != self.name:
            raise DropRefusedError(f"drop({confirm!r}) refused: confirm with the queue's name")
        queued, in_flight = self.scripts.run("drop")
        return Dropped([as_text(x) for x in queued], [as_text(x) for x in in_flight])

    # -- introspection, for operators (each reads up to a window of the queue: inspection.py) --
    def fairness_lag(self, window: int = LAG_WINDOW) -> float:
        """How far ahead the most-served partition with items queued is of the least-served
        one, in weight units: max over partitions of (virtual start of its next item - the
        queue's virtual time) x its share, over the first `window` items in fair order (a
        partition whose next item lies beyond the window counts from the window's end)."""
        return read_fairness_lag(self.redis, self.keys, self.share, window)

    def head(self) -> tuple[str, str] | None:
        """The first item in line that may start, which the next dequeue would lease (expired
        leases aside): (its task id, its partition), or None when none is queued (or it was
        leased between the two reads)."""
        return read_head(self.redis, self.keys)

    def top_partitions(self, n: int = 10) -> list[tuple[str, int]]:
        """The n partitions with most items queued, most first (reads one counter per
        partition with items queued)."""
        return read_top_partitions(self.redis, self.keys, n)
