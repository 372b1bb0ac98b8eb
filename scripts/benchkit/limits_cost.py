"""What per-partition limits cost a dequeue+ack (docs/vtrr.md, "Per-partition limits").

Three variants of `FairQueue.dequeue()` then `ack()`, side by side in alternating rounds on one
Redis with functions, each pair's Redis time taken from INFO commandstats, over the same backlog
(scripts/benchkit/dequeue_floor.py's `backlogged`: every partition keeps an item queued):

- none: no partition has limits (what every queue without limits runs);
- count: every partition has a `most_in_flight` that never binds;
- held: every partition has a `most_in_flight` and a `most_held` that never bind, so each lease
  and each refresh also adds up what the partition's items in flight still hold.

A limit that binds costs no more per dequeue: its partition's items wait out of the queue.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from app.vtrr import Limits
from scripts.benchkit.dequeue_floor import backlogged, measured_on_own_redis, queue_pairs
from scripts.benchkit.stats import alternate, median, ratio

VARIANTS = ("none", "count", "held")
#: Limits that never bind over a round of dequeue-then-ack (one item in flight at a time).
NEVER_BINDING = {
    "none": Limits(),
    "count": Limits(most_in_flight=1_000_000),
    "held": Limits(most_in_flight=1_000_000, most_held=1e12, weight_per_second=1000),
}


def pairs_usec(client: redis.Redis, variant: str, n: int, partitions: int) -> float:
    """µs of Redis time per dequeue+ack, over n items of `partitions` partitions."""
    queue = backlogged(client, f"limits-{variant}", n, partitions)
    for p in range(partitions):
        queue.set_limits(f"p{p}", NEVER_BINDING[variant])
    return queue_pairs(client, queue, n, partitions)


def measure(url: str, rounds: int, items: int, partitions: int) -> dict[str, list[float]]:
    client = redis.Redis.from_url(url)
    found: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _, name in alternate(rounds, VARIANTS):
        found[name].append(pairs_usec(client, name, items, partitions))
        client.flushall()
    client.close()
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Print each variant's median µs per dequeue+ack and its ratio to no limits."""
    found = measured_on_own_redis(__doc__, argv, measure)
    mid = {name: median(values) for name, values in found.items()}
    for name, values in found.items():
        each = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name}: {mid[name]:.1f} µs per dequeue+ack (rounds: {each})")
    for name in VARIANTS[1:]:
        print(f"{name} / none = {ratio(mid[name], mid['none']):.2f}")
    return 0
