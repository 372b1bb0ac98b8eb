"""Bring a queue written by fairgpu 0.1's layout to the current one, once.

    uv run python -m app.vtrr.migrate --redis-url redis://host:6379/0 short long

The 0.1 layout kept an item in five hashes of the queue (`task` and `inflight_task` for its
payload, `meta` for cjson {p, c, w, m, k}, `lease`, `timeouts`), lease expiries in seconds, and
counted every dequeue and ack. The current one keeps an item in one hash of its own
(`vtrr:{name}:item:<id>`, see lua/lib/keys.lua), expiries in whole microseconds, and derives
`dequeued` and `acked` from the other counters (FairQueue.stats). This command rewrites the
first into the second, so that every queued item keeps its place and every lease its holder,
and the counters read the same as before.

Stop the API and the workers first: it reads and writes in batches, not atomically. It is safe to
run again: a queue with nothing of the old layout is left as it is.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import redis

from app.vtrr.keys import Keys
from app.vtrr.layout import Field, Stat, index_entry
from app.vtrr.wire import as_text

OLD_PARTS = ("task", "meta", "inflight_task", "lease", "timeouts")
BATCH = 1000


def old_key(keys: Keys, part: str) -> str:
    """A key of the 0.1 layout, beside the current ones."""
    return keys.queue.removesuffix(":queue") + f":{part}"


def migrate(client: redis.Redis, name: str) -> int:
    """Rewrite queue `name` into the current layout; returns how many items it moved."""
    keys = Keys.for_queue(name)
    old = {part: old_key(keys, part) for part in OLD_PARTS}
    if not client.exists(*old.values()):
        return 0
    queued = int(client.hlen(old["task"]))
    in_flight = int(client.hlen(old["inflight_task"]))
    moved = _move(client, keys, old, "task") + _move(client, keys, old, "inflight_task")
    _keep_counts(client, keys, queued, in_flight)
    client.delete(*old.values())
    return moved


def _move(client: redis.Redis, keys: Keys, old: dict[str, str], where: str) -> int:
    """Each item of one of the old payload hashes into a hash of its own."""
    moved = 0
    batch: list[tuple[str, str]] = []
    for raw_id, payload in client.hscan_iter(old[where], count=BATCH):
        batch.append((as_text(raw_id), as_text(payload)))
        if len(batch) >= BATCH:
            moved += _move_batch(client, keys, old, batch, leased=where == "inflight_task")
            batch = []
    if batch:
        moved += _move_batch(client, keys, old, batch, leased=where == "inflight_task")
    return moved


def _move_batch(
    client: redis.Redis,
    keys: Keys,
    old: dict[str, str],
    batch: list[tuple[str, str]],
    *,
    leased: bool,
) -> int:
    ids = [task_id for task_id, _ in batch]
    metas = client.hmget(old["meta"], ids)
    tokens = client.hmget(old["lease"], ids) if leased else [None] * len(ids)
    timeouts = client.hmget(old["timeouts"], ids)
    expiries = client.zmscore(keys.inflight, ids) if leased else [None] * len(ids)  # one call
    with client.pipeline(transaction=False) as pipe:
        for (task_id, payload), meta, token, times, expiry in zip(
            batch, metas, tokens, timeouts, expiries, strict=True
        ):
            if meta is None:
                continue  # an item the old scripts had half forgotten: nothing to keep
            info = json.loads(meta)
            fields = _fields(info, payload, token, times)
            pipe.hset(keys.item_key(task_id), items=[x for pair in fields.items() for x in pair])
            if leased and expiry is not None:
                pipe.zadd(keys.inflight, {task_id: round(expiry * 1_000_000)})
            elif not leased:
                pipe.zadd(keys.partition_items, {fields[Field.ENTRY]: 0})  # old index: maybe not
        pipe.execute()
    return sum(meta is not None for meta in metas)


def _fields(
    info: dict[str, str], payload: str, token: bytes | str | None, times: bytes | str | None
) -> dict[str, str]:
    """An item's hash from its old meta (cjson {p, c, w, m, k}: 0.1's own names, kept as they
    were), payload, lease token and timeouts."""
    partition, member = str(info["p"]), str(info["m"])
    fields: dict[str, str] = {
        Field.PARTITION: partition,
        Field.COST: str(info["c"]),
        Field.PAYLOAD: payload,
        Field.MEMBER: member,
        Field.ENTRY: index_entry(partition, member),
    }
    if "w" in info:  # items of before 0.1 kept weights have none, and are never credited
        fields[Field.WEIGHT] = str(info["w"])
    if info.get("k"):
        fields[Field.CREDITED] = str(info["k"])
    if token is not None:
        fields[Field.LEASE] = as_text(token)
    if times is not None:
        fields[Field.TIMEOUTS] = as_text(times)
    return fields


def _keep_counts(client: redis.Redis, keys: Keys, queued: int, in_flight: int) -> None:
    """Turn the old `dequeued` and `acked` counters into the drop counts that make the derived
    ones (queue.stats_of) read the same."""
    raw = {as_text(k): int(v) for k, v in client.hgetall(keys.stats).items()}
    if "dequeued" not in raw and "acked" not in raw:
        return
    requeued = raw.get(Stat.RELEASED, 0) + raw.get(Stat.RECLAIMED, 0)
    dequeued, acked = raw.get("dequeued", 0), raw.get("acked", 0)  # 0.1's counters
    enqueued, cancelled = raw.get(Stat.ENQUEUED, 0), raw.get(Stat.CANCELLED, 0)
    dropped_queued = enqueued + requeued - cancelled - queued - dequeued
    dropped_in_flight = dequeued - requeued - in_flight - acked
    with client.pipeline(transaction=True) as pipe:
        pipe.hincrby(keys.stats, Stat.DROPPED_QUEUED, max(dropped_queued, 0))
        pipe.hincrby(keys.stats, Stat.DROPPED_IN_FLIGHT, max(dropped_in_flight, 0))
        pipe.hdel(keys.stats, "dequeued", "acked")
        pipe.execute()


def main(argv: Sequence[str] | None = None) -> int:
    """Migrate the queues named on the command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--redis-url", default="redis://localhost:6379/0")
    parser.add_argument("queues", nargs="+", help="queue names (the service's: short long)")
    args = parser.parse_args(argv)
    client = redis.Redis.from_url(args.redis_url)
    for name in args.queues:
        print(f"{name}: {migrate(client, name)} items moved to the current layout")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
