"""How far the library's dequeue+ack is from the least any leased dequeue+ack can cost, and
how much of the gap is the fair queue's bookkeeping rather than the shape of its code. Three
variants, side by side in alternating rounds on one Redis with functions, each pair's Redis time
read from INFO commandstats (usec per FCALL):

- library: `FairQueue.dequeue()` then `ack()`, default options;
- flat: the same commands on the same keys in the same order, written as one flat function
  with its keys in locals (no shared helpers, no key table, only the keys it touches): what the
  library's Lua could cost if it were written for this one path (FLAT_DEQUEUE);
- floor: two functions that do only what every leased queue must (pop the head, record the
  lease and its expiry, read the payload; check the token, forget the lease and the item).

Every partition keeps one item queued to the end of a round: the library then takes its
steady path (no partition goes idle, no lease expires), the only one the flat function models.

    uv run python scripts/bench_dequeue_floor.py --redis-server <a Redis 7 redis-server>
"""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

from app.dev.redis_server import RedisServer
from app.vtrr import FairQueue, Item
from app.vtrr.keys import Keys
from app.vtrr.layout import MEMBER_PREFIX, Field
from app.vtrr.queue import RECLAIM_BATCH
from app.vtrr.wire import micros
from scripts.benchkit.stats import alternate, median, ratio

# The item's fields and the task id's place in a member, as the library's (app/vtrr/layout.py):
# flat_dequeue works on the library's items, and floor_ack acks them.
LEASE, PAYLOAD_FIELD, TASK_ID_AT = Field.LEASE.value, Field.PAYLOAD.value, MEMBER_PREFIX + 1
READ = (Field.PARTITION, Field.WEIGHT, Field.PAYLOAD, Field.TIMEOUTS, Field.ENTRY)
ITEM_FIELDS = ", ".join(f"'{field.value}'" for field in READ)
FLOOR = f"""#!lua name=floor
redis.register_function('floor_dequeue', function(KEYS, ARGV)
  local head = redis.call('ZPOPMIN', KEYS[1])
  if not head[1] then return false end
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[2] .. head[1], '{LEASE}', ARGV[1])
  redis.call('ZADD', KEYS[3], t[1] .. string.sub('00000' .. t[2], -6), head[1])
  return {{head[1], redis.call('HGET', KEYS[2] .. head[1], '{PAYLOAD_FIELD}')}}
end)
redis.register_function('floor_ack', function(KEYS, ARGV)
  if redis.call('HGET', KEYS[1] .. ARGV[1], '{LEASE}') ~= ARGV[2] then return 0 end
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('DEL', KEYS[1] .. ARGV[1])
  return 1
end)
"""
#: The library's dequeue (lua/lib/next_item.lua's lease_next) on its steady path, flat: the reclaim
#: check, the pop, the virtual clock, the item, the credit index, the partition's count, the
#: queued weight, the lease, its expiry, the queue's length. Where the library would take
#: another path (a lease to reclaim, a partition left with none queued) it stops the benchmark
#: with an error instead. Its ack is floor_ack: the library's ack runs those three commands.
#: KEYS: queue, item prefix, inflight, cvt, pqueued, queued_weight, items.
#: ARGV: lease microseconds, lease token, most leases to reclaim.
FLAT_DEQUEUE = f"""
redis.register_function('flat_dequeue', function(KEYS, ARGV)
  local t = redis.call('TIME')
  t = t[1] .. string.sub('00000' .. t[2], -6)
  if redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', t, 'LIMIT', '0', ARGV[3])[1] then
    return redis.error_reply('flat_dequeue: a lease expired, which it does not model')
  end
  local head = redis.call('ZPOPMIN', KEYS[1])
  if not head[1] then return false end
  local id = string.sub(head[1], {TASK_ID_AT})
  redis.call('SET', KEYS[4], head[2])
  local key = KEYS[2] .. id
  local f = redis.call('HMGET', key, {ITEM_FIELDS})
  redis.call('ZREM', KEYS[7], f[5])
  if redis.call('HINCRBY', KEYS[5], f[1], '-1') <= 0 then
    return redis.error_reply('flat_dequeue: a partition went idle, which it does not model')
  end
  redis.call('DECRBY', KEYS[6], f[2])
  redis.call('HSET', key, '{LEASE}', ARGV[2])
  local expiry = string.format('%d', tonumber(t) + tonumber(ARGV[1]))
  redis.call('ZADD', KEYS[3], expiry, id)
  redis.call('ZCARD', KEYS[1])
  return {{id, f[3], f[4] or '0', expiry}}
end)
"""
PAYLOAD = "x" * 100
VARIANTS = ("library", "flat", "floor")


def fcall_usec(client: redis.Redis, run: Callable[[], None]) -> float:
    """Redis time of everything `run` calls with FCALL, in µs (INFO commandstats)."""
    client.config_resetstat()
    run()
    stats = client.info("commandstats").get("cmdstat_fcall", {})
    return float(stats.get("usec", 0))


def backlogged(client: redis.Redis, name: str, n: int, partitions: int) -> FairQueue:
    """A fair queue whose partitions hold n items between them, plus one more each (left
    queued, so that no partition goes idle while n are taken)."""
    queue = FairQueue(client, name)
    for p in range(partitions):
        queue.enqueue(f"p{p}", [Item(PAYLOAD) for _ in range(n // partitions + 1)])
    return queue


def library_pairs(client: redis.Redis, n: int, partitions: int) -> float:
    """µs of Redis time per FairQueue dequeue+ack, over n items of `partitions` partitions."""
    return queue_pairs(client, backlogged(client, "floor-library", n, partitions), n, partitions)


def queue_pairs(client: redis.Redis, queue: FairQueue, n: int, partitions: int) -> float:
    """µs of Redis time per dequeue+ack of a backlogged queue (`backlogged`'s n, partitions)."""
    taken = n // partitions * partitions

    def pairs() -> None:
        for _ in range(taken):
            lease = queue.dequeue()
            assert lease is not None
            queue.ack(lease.task_id, lease.token)

    return fcall_usec(client, pairs) / taken


def flat_keys(keys: Keys) -> list[str]:
    """FLAT_DEQUEUE's KEYS, of a FairQueue's keys."""
    return [
        keys.queue,
        keys.item,
        keys.inflight,
        keys.current_virtual_time,
        keys.partition_queued,
        keys.queued_weight,
        keys.partition_items,
    ]


def flat_pair(client: redis.Redis, keys: Keys, lease_us: int) -> list[bytes] | None:
    """One flat dequeue, then its ack: the lease's reply, or None when nothing was queued."""
    token = secrets.token_hex(16)
    reply = client.fcall("flat_dequeue", 7, *flat_keys(keys), lease_us, token, RECLAIM_BATCH)
    if not reply:
        return None
    client.fcall("floor_ack", 2, keys.item, keys.inflight, reply[0], token)
    return list(reply)


def flat_pairs(client: redis.Redis, n: int, partitions: int) -> float:
    """µs of Redis time per flat dequeue+ack, over the same items as library_pairs."""
    queue = backlogged(client, "floor-flat", n, partitions)
    taken = n // partitions * partitions
    lease_us = micros(queue.lease_seconds)

    def pairs() -> None:
        for _ in range(taken):
            assert flat_pair(client, queue.keys, lease_us) is not None

    return fcall_usec(client, pairs) / taken


def floor_backlog(client: redis.Redis, n: int) -> None:
    """n items for the floor's functions."""
    with client.pipeline(transaction=False) as pipe:
        for i in range(n):
            pipe.zadd("floor:queue", {f"i{i}": i})
            pipe.hset(f"floor:item:i{i}", "d", PAYLOAD)
        pipe.execute()


def floor_drain(client: redis.Redis) -> None:
    """Floor dequeue+ack pairs until floor_backlog's items are gone."""
    while got := client.fcall(
        "floor_dequeue", 3, "floor:queue", "floor:item:", "floor:inflight", "t"
    ):
        client.fcall("floor_ack", 2, "floor:item:", "floor:inflight", got[0], "t")


def floor_pairs(client: redis.Redis, n: int) -> float:
    """µs of Redis time per floor dequeue+ack, over n items."""
    floor_backlog(client, n)
    return fcall_usec(client, lambda: floor_drain(client)) / n


def load(client: redis.Redis) -> None:
    """Install the floor's and the flat variant's functions."""
    client.function_load(FLOOR + FLAT_DEQUEUE, replace=True)


def measure(url: str, rounds: int, items: int, partitions: int) -> dict[str, list[float]]:
    client = redis.Redis.from_url(url)
    load(client)
    found: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _, name in alternate(rounds, VARIANTS):
        if name == "library":
            found[name].append(library_pairs(client, items, partitions))
        elif name == "flat":
            found[name].append(flat_pairs(client, items, partitions))
        else:
            found[name].append(floor_pairs(client, items))
        client.flushall()  # each round starts from an empty server (functions stay loaded)
    client.close()
    return found


Measure = Callable[[str, int, int, int], dict[str, list[float]]]


def measured_on_own_redis(doc: str | None, argv: Sequence[str] | None, run: Measure) -> Any:
    """The rounds of a dequeue+ack benchmark (run(url, rounds, items, partitions)) on a Redis of
    its own, from its command line: --rounds, --items, --partitions, --redis-server."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--redis-server", help="a redis-server with functions (Redis 7)")
    args = parser.parse_args(argv)
    if args.redis_server:
        os.environ["FAIRGPU_REDIS_SERVER"] = args.redis_server
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        return run(server.url, args.rounds, args.items, args.partitions)


def main(argv: Sequence[str] | None = None) -> int:
    """Print each variant's median µs per dequeue+ack and the ratios between them."""
    found = measured_on_own_redis(__doc__, argv, measure)
    for name, values in found.items():
        each = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name}: {median(values):.1f} µs per dequeue+ack (rounds: {each})")
    mid = {name: median(values) for name, values in found.items()}
    print(f"library / floor = {ratio(mid['library'], mid['floor']):.2f}")
    print(f"library / flat = {ratio(mid['library'], mid['flat']):.2f}")
    print(f"flat / floor = {ratio(mid['flat'], mid['floor']):.2f}")
    return 0
