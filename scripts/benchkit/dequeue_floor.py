"""How far the library's dequeue+ack is from the least any leased dequeue+ack can cost: the
pair of `FairQueue.dequeue()` then `ack()` (default options) against a floor of two functions
that do only what every leased queue must (pop the head, record the lease and its expiry; check
the token, forget the lease and the item: seven commands), side by side in alternating rounds on
one Redis with functions, each pair's Redis time read from INFO commandstats (usec per FCALL).

    uv run python scripts/bench_dequeue_floor.py --redis-server /usr/bin/redis-server
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import redis

from app.dev.redis_server import RedisServer
from app.vtrr import FairQueue, Item
from scripts.benchkit.stats import alternate, median, ratio

FLOOR = """#!lua name=floor
redis.register_function('floor_dequeue', function(KEYS, ARGV)
  local head = redis.call('ZPOPMIN', KEYS[1])
  if not head[1] then return false end
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[2] .. head[1], 'l', ARGV[1])
  redis.call('ZADD', KEYS[3], t[1] .. string.sub('00000' .. t[2], -6), head[1])
  return {head[1], redis.call('HGET', KEYS[2] .. head[1], 'd')}
end)
redis.register_function('floor_ack', function(KEYS, ARGV)
  if redis.call('HGET', KEYS[1] .. ARGV[1], 'l') ~= ARGV[2] then return 0 end
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('DEL', KEYS[1] .. ARGV[1])
  return 1
end)
"""
PAYLOAD = "x" * 100


def fcall_usec(client: redis.Redis, run: Callable[[], None]) -> float:
    """Redis time of everything `run` calls with FCALL, in µs (INFO commandstats)."""
    client.config_resetstat()
    run()
    stats = client.info("commandstats").get("cmdstat_fcall", {})
    return float(stats.get("usec", 0))


def library_pairs(client: redis.Redis, n: int, partitions: int) -> float:
    """µs of Redis time per FairQueue dequeue+ack, over n items of `partitions` partitions."""
    queue = FairQueue(client, "floor-library")
    for p in range(partitions):
        queue.enqueue(f"p{p}", [Item(PAYLOAD) for _ in range(n // partitions)])

    def pairs() -> None:
        while (lease := queue.dequeue()) is not None:
            queue.ack(lease.task_id, lease.token)

    return fcall_usec(client, pairs) / n


def floor_pairs(client: redis.Redis, n: int) -> float:
    """µs of Redis time per floor dequeue+ack, over n items."""
    with client.pipeline(transaction=False) as pipe:
        for i in range(n):
            pipe.zadd("floor:queue", {f"i{i}": i})
            pipe.hset(f"floor:item:i{i}", "d", PAYLOAD)
        pipe.execute()

    def pairs() -> None:
        while got := client.fcall(
            "floor_dequeue", 3, "floor:queue", "floor:item:", "floor:inflight", "t"
        ):
            client.fcall("floor_ack", 2, "floor:item:", "floor:inflight", got[0], "t")

    return fcall_usec(client, pairs) / n


def measure(url: str, rounds: int, items: int, partitions: int) -> dict[str, list[float]]:
    client = redis.Redis.from_url(url)
    client.function_load(FLOOR, replace=True)
    found: dict[str, list[float]] = {"library": [], "floor": []}
    for _, name in alternate(rounds, list(found)):
        if name == "library":
            found[name].append(library_pairs(client, items, partitions))
        else:
            found[name].append(floor_pairs(client, items))
    client.close()
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Print each variant's median µs per dequeue+ack and their ratio."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--redis-server", help="a redis-server with functions (Redis 7)")
    args = parser.parse_args(argv)
    if args.redis_server:
        os.environ["FAIRGPU_REDIS_SERVER"] = args.redis_server
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        found = measure(server.url, args.rounds, args.items, args.partitions)
    for name, values in found.items():
        each = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name}: {median(values):.1f} µs per dequeue+ack (rounds: {each})")
    print(f"library / floor = {ratio(median(found['library']), median(found['floor'])):.2f}")
    return 0
