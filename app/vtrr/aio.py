"""AsyncFairQueue: the fair queue's producer and inspection side on an asyncio Redis client.

For web handlers that must not block their event loop. It writes and reads exactly what
FairQueue does (same scripts, same keys); leasing stays with the workers' FairQueue, though the
holder of a lease may credit it from here. Enqueue answers how many triggers to publish, which
the caller sends off the event loop, e.g. `await asyncio.to_thread(vtrr.publish_triggers, n)`.
With the queue's hooks, admit_and_enqueue runs the application's `admit` and `enqueued` in the
enqueue's own call (see hooks.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from redis.asyncio import Redis as AsyncRedis

from app.vtrr.item import Item, Shares, enqueue_args, share_of
from app.vtrr.keys import Keys
from app.vtrr.layout import FAIR, FRONT
from app.vtrr.limits import Hold, Limits, check_half_life, hold_of
from app.vtrr.lua_text import NO_HOOKS
from app.vtrr.replicated import REPLICA_WAIT_MS, Replicas
from app.vtrr.scripts import AsyncScripts, TriggerKeys
from app.vtrr.wire import (
    Admitted,
    admitted_of,
    as_text,
    credit_args,
    credit_of,
    hooked_args,
    rank_of,
    ranks_of,
    stats_of,
)


class AsyncFairQueue:
    """Enqueue, credit, cancel, position, promote and the counts of a fair queue, with asyncio."""

    def __init__(
        self,
        redis_client: AsyncRedis,
        name: str,
        *,
        shares: Shares | None = None,
        trigger_cap: int = -1,
        trigger_keys: TriggerKeys | None = None,
        hooks_lua: str = NO_HOOKS,
        replicas: int = 0,
        replica_wait_ms: int = REPLICA_WAIT_MS,
        limits_group: str | None = None,
        usage_half_life_s: float | None = None,
    ) -> None:
        self.name = name
        self._half_life = check_half_life(usage_half_life_s)
        self.keys = Keys.for_queue(name, limits_group)
        self.redis = redis_client
        self._shares = shares
        self._trigger_cap = trigger_cap
        self._scripts = AsyncScripts(redis_client, self.keys, trigger_keys, hooks_lua)
        # With replicas, an enqueue returns only once that many replicas have it (WAIT), else
        # raises NotReplicatedError: a failover cannot then lose an item its caller was told of.
        self._replicas: Replicas | None = (replicas, replica_wait_ms) if replicas else None

    async def enqueue(
        self,
        partition_key: str,
        items: Iterable[Item],
        *,
        front: bool = False,
        max_queued: int | None = None,
    ) -> tuple[list[str], int]:
        """Queue items of one partition atomically; returns (their ids, triggers to publish).

        Raises as FairQueue.enqueue does (DuplicateTaskError, QueueFullError).
        """
        ids, args = enqueue_args(partition_key, self._shares, items)
        if not ids:
            return [], 0
        placement = FRONT if front else FAIR
        limit = -1 if max_queued is None else max_queued
        reply = await self._scripts.run(
            "enqueue",
            partition_key,
            self._trigger_cap,
            placement,
            0,
            limit,
            self._half_life or 0,
            0,
            *args,
            replicas=self._replicas,
        )
        return ids, int(reply[0])

    async def admit_and_enqueue(
        self,
        partition_key: str,
        items: Iterable[Item],
        hook_args: Sequence[str | int],
        *,
        max_queued: int | None = None,
    ) -> Admitted:
        """Queue items of one partition as enqueue does, with the hooks' `admit` and `enqueued`
        given hook_args in the same atomic call: `admit` first, whose answer other than nil
        stops the call (queued False, nothing of the queue written); then the queue's checks;
        then `enqueued`, before the queue's writes. `reply` is what the hook that ran last
        returned.

        Raises as enqueue does (DuplicateTaskError, QueueFullError), and a hook's error reply
        as redis-py's ResponseError. Items and hook_args must not be empty.
        """
        ids, args = enqueue_args(partition_key, self._shares, items)
        if not ids or not hook_args:
            raise ValueError("admit_and_enqueue needs items and hook arguments")
        limit = -1 if max_queued is None else max_queued
        reply = await self._scripts.run(
            "enqueue",
            partition_key,
            self._trigger_cap,
            FAIR,
            0,
            limit,
            self._half_life or 0,
            *hooked_args(hook_args),
            *args,
            replicas=self._replicas,
        )
        return admitted_of(ids, reply)

    async def credit(self, task_id: str, token: str, used_weight: int) -> float:
        """Credit a leased item's partition with the weight it left unused (FairQueue.credit)."""
        return credit_of(
            await self._scripts.run("credit", *credit_args(task_id, token, used_weight))
        )

    async def reshare(self, partition_key: str, share: float) -> int:
        """Charge the partition's queued items again at a new share (FairQueue.reshare)."""
        share = share_of({partition_key: share}, partition_key)
        return int(await self._scripts.run("reshare", partition_key, repr(share)))

    async def cancel(self, task_id: str) -> bool:
        """Remove a queued item; False when it is not queued."""
        return bool(await self._scripts.run("cancel", task_id))

    async def position(self, task_id: str) -> int | None:
        """The item's 0-based place in dispatch order, or None when it is not queued."""
        return rank_of(await self._scripts.run("position", task_id))

    async def positions(self, task_ids: list[str]) -> list[int | None]:
        """The places of many items in one call (None for one not queued)."""
        return ranks_of(await self._scripts.run("positions", *task_ids) if task_ids else [])

    async def promote(self, task_id: str) -> bool:
        """Move a queued item ahead of every other; False when it is not queued."""
        return bool(await self._scripts.run("promote", task_id))

    async def set_limits(self, partition_key: str, limits: Limits) -> int:
        """Set or clear a partition's limits (see FairQueue.set_limits); returns the triggers
        to publish (items it let start)."""
        reply = await self._scripts.run("limit", partition_key, *limits.args(), self._trigger_cap)
        return int(reply[0])

    async def hold(self, partition_key: str) -> Hold | None:
        """Whether the partition's limits hold its items back in this queue now, and until
        when as far as known (see Hold); None when they do not (or it has none)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hget(self.keys.limits, partition_key)
            pipe.hexists(self.keys.representatives, partition_key)
            pipe.zscore(self.keys.waits, partition_key)
            pipe.hvals(self.keys.live + partition_key)
            raw, rep, wait_us, live = await pipe.execute()
        return hold_of(raw, rep, wait_us, live)

    async def limited(self) -> set[str]:
        """The partitions that have limits in this queue."""
        return {as_text(p) for p in await self.redis.hkeys(self.keys.limits)}

    async def length(self) -> int:
        """How many items are queued, held back by their partition's limits or not."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zcard(self.keys.queue)
            pipe.get(self.keys.parked)
            pipe.smembers(self.keys.pools)
            queued, parked, pools = await pipe.execute()
        return int(queued) + int(parked or 0) + await self._pooled(pools)

    async def _pooled(self, pools: set[Any]) -> int:
        """How many items wait in the lines of these pools (FairQueue's twin)."""
        if not pools:
            return 0
        async with self.redis.pipeline(transaction=False) as pipe:
            for line in (self.keys.pool_line(as_text(p)) for p in pools):
                pipe.zcard(line)
            return sum(int(n) for n in await pipe.execute())

    async def pending(self) -> int:
        """How many items are in flight."""
        return int(await self.redis.zcard(self.keys.inflight))

    async def queued_weight(self) -> int:
        """The sum of the weights of the items queued (see FairQueue.queued_weight)."""
        return int(await self.redis.get(self.keys.queued_weight) or 0)

    async def stats(self) -> dict[str, int]:
        """The queue's counters (see FairQueue.stats)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(self.keys.stats)
            pipe.zcard(self.keys.queue)
            pipe.get(self.keys.parked)
            pipe.zcard(self.keys.inflight)
            pipe.smembers(self.keys.pools)
            raw, queued, parked, in_flight, pools = await pipe.execute()
        queued = int(queued) + int(parked or 0) + await self._pooled(pools)
        return stats_of(raw, queued, in_flight)
