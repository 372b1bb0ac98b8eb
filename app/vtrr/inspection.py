"""Reads of a fair queue for operators, each over up to a window of the queue (FairQueue's
fairness_lag, head and top_partitions): plain Redis reads of its keys, no Lua, not on the
hot path."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from redis import Redis

from app.vtrr.keys import Keys
from app.vtrr.layout import Field
from app.vtrr.wire import as_text, task_id_of

LAG_WINDOW = 1000


def read_fairness_lag(
    redis: Redis, keys: Keys, share: Callable[[str], float], window: int = LAG_WINDOW
) -> float:
    """How far ahead the most-served partition with items queued is of the least-served one,
    in weight units (see FairQueue.fairness_lag); share gives a partition's share."""
    with redis.pipeline(transaction=False) as pipe:
        pipe.get(keys.current_virtual_time)
        pipe.zrange(keys.queue, 0, window - 1, withscores=True)
        clock, head = pipe.execute()
    if not head:
        return 0.0
    with redis.pipeline(transaction=False) as pipe:
        for member, _ in head:
            pipe.hget(keys.item_key(task_id_of(member)), Field.PARTITION)
        partitions = pipe.execute()
    first: dict[str, float] = {}
    for (_, score), partition in zip(head, partitions, strict=True):
        if partition is not None:
            first.setdefault(as_text(partition), float(score))
    vt = float(clock or 0)
    return max((first[p] - vt) * share(p) for p in first)


def read_head(redis: Redis, keys: Keys) -> tuple[str, str] | None:
    """The first item in line that may start: (its task id, its partition), or None (see
    FairQueue.head). For a consumer of a kind, the first among the lines it leases from."""
    lines = [keys.queue]
    if keys.kclock != keys.current_virtual_time:
        lines += [keys.pool_line(as_text(p)) for p in redis.smembers(keys.kpools)]
    with redis.pipeline(transaction=False) as pipe:
        for line in lines:
            pipe.zrange(line, 0, 0, withscores=True)
        heads: list[Any] = [head[0] for head in pipe.execute() if head]
    if not heads:
        return None
    member, _ = min(heads, key=lambda head: (float(head[1]), as_text(head[0])))
    task_id = task_id_of(member)
    partition = redis.hget(keys.item_key(task_id), Field.PARTITION)
    return None if partition is None else (task_id, as_text(partition))


def read_top_partitions(redis: Redis, keys: Keys, n: int) -> list[tuple[str, int]]:
    """The n partitions with most items queued, most first (see FairQueue.top_partitions)."""
    raw = redis.hgetall(keys.partition_queued)
    counts = [(as_text(p), int(c)) for p, c in raw.items()]
    return heapq.nlargest(n, counts, key=lambda pc: (pc[1], pc[0]))
