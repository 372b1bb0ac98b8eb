"""What kinds of consumer cost a dequeue+ack (docs/vtrr.md, "Kinds"; issue 41: a mixed fleet).

Variants side by side in alternating rounds on one Redis with functions, each pair's Redis time
read from INFO commandstats (usec per FCALL), over the same backlog shape as
scripts/benchkit/dequeue_floor.py (n items of `partitions` partitions, each partition keeping
items queued to the end of a round, so that no partition goes idle: the steady path):

- floor: dequeue_floor's two functions, the least any leased dequeue+ack costs;
- library: `FairQueue.dequeue()` then `ack()`, no kinds anywhere (a one-class fleet: its cost
  must stay within 2.3x the floor, as issue 26 left it);
- kind-0: a consumer of kind "a" over items that name no kinds (the full dequeue, which a
  consumer of a kind always takes, with no pool to look at);
- kind-1, kind-2, kind-4: a consumer of kind "a" over items spread evenly over 1, 2 or 4 pools
  that all name "a" (POOLS);
- a+b: consumers of kinds "a" and "b" in turn over 4 pools, 3 of which each may take.

Every lease is checked (outside the timed Redis calls) to be one its consumer may take, and a
lone consumer's leases to be spread evenly over the partitions, as fair order does: a variant
that leased otherwise stops the run with an error rather than print a number.

    uv run python scripts/bench_kinds.py --redis-server <a Redis 7 redis-server>
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import redis

from app.vtrr import FairQueue, Item
from app.vtrr.wire import as_text
from scripts.benchkit.dequeue_floor import (
    fcall_usec,
    floor_pairs,
    library_pairs,
    load,
    measured_on_own_redis,
)
from scripts.benchkit.stats import alternate, median, ratio

Pool = tuple[str, ...]
#: The pools each variant's items are spread over (None: no kinds), and its consumers' kinds.
POOLS: dict[str, tuple[Pool | None, ...]] = {
    "kind-0": (None,),
    "kind-1": (("a",),),
    "kind-2": (("a",), ("a", "b")),
    "kind-4": (("a",), ("a", "b"), ("a", "c"), ("a", "b", "c")),
    "a+b": (("a",), ("b",), ("a", "b"), ("a", "b", "c")),
}
CONSUMERS = {name: ("a", "b") if name == "a+b" else ("a",) for name in POOLS}
VARIANTS = ("floor", "library", *POOLS)
#: Issue 26's bar for a dequeue+ack without kinds, over the floor.
FLOOR_BAR = 2.3
PAYLOAD_SIZE = 100


def payload(partition: str, pool: Pool | None) -> str:
    """An item's payload: its partition and its kinds, padded as the floor's payload is long."""
    text = f"{partition}|{','.join(pool or ())}|"
    return text.ljust(PAYLOAD_SIZE, "x")


def pooled_backlog(client: redis.Redis, variant: str, n: int, partitions: int) -> None:
    """n items of `partitions` partitions, item i of partition p in pool (p + i) mod the
    variant's pools, so that the lines' heads are spread too; plus one more item per pool and
    partition, left queued so that no partition goes idle while n are taken."""
    pools = POOLS[variant]
    queue = FairQueue(client, variant)
    for p in range(partitions):
        count = n // partitions + len(pools)
        kinds = [pools[(p + i) % len(pools)] for i in range(count)]
        queue.enqueue(f"p{p}", [Item(payload(f"p{p}", k), kinds=k) for k in kinds])


def kinds_pairs(client: redis.Redis, variant: str, n: int, partitions: int) -> float:
    """µs of Redis time per dequeue+ack by the variant's consumers in turn (pooled_backlog)."""
    pooled_backlog(client, variant, n, partitions)
    consumers = [FairQueue(client, variant, kind=kind) for kind in CONSUMERS[variant]]
    taken = n // partitions * partitions
    leased: Counter[str] = Counter()

    def pairs() -> None:
        for i in range(taken):
            consumer = consumers[i % len(consumers)]
            lease = consumer.dequeue()
            if lease is None:
                raise RuntimeError(f"{variant}: kind {consumer.kind} found nothing, pair {i}")
            partition, kinds, _ = lease.payload.split("|", 2)
            if kinds and consumer.kind not in kinds.split(","):
                raise RuntimeError(f"{variant}: kind {consumer.kind} leased an item of {kinds}")
            if not consumer.ack(lease.task_id, lease.token):
                raise RuntimeError(f"{variant}: the ack of {lease.task_id} was refused")
            leased[partition] += 1

    usec = fcall_usec(client, pairs) / taken
    check_steady(client, variant, partitions, leased)
    return usec


def check_steady(client: redis.Redis, variant: str, partitions: int, leased: Counter[str]) -> None:
    """Raise unless every partition still has items queued (the round stayed on the steady
    path), and, for a lone consumer, unless each partition was leased as often (fair order)."""
    queued = FairQueue(client, variant).keys.partition_queued
    left = {as_text(key): int(v) for key, v in client.hgetall(queued).items()}
    idle = [f"p{p}" for p in range(partitions) if left.get(f"p{p}", 0) <= 0]
    if idle:
        raise RuntimeError(f"{variant}: partitions went idle, off the steady path: {idle}")
    if len(CONSUMERS[variant]) == 1 and len(set(leased.values())) > 1:
        raise RuntimeError(f"{variant}: leases not spread evenly over partitions: {leased}")


def measure(url: str, rounds: int, items: int, partitions: int) -> dict[str, list[float]]:
    """Each variant's µs per dequeue+ack, a value per round, the variants alternating."""
    client = redis.Redis.from_url(url)
    load(client)
    found: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _, name in alternate(rounds, VARIANTS):
        if name == "floor":
            found[name].append(floor_pairs(client, items))
        elif name == "library":
            found[name].append(library_pairs(client, items, partitions))
        else:
            found[name].append(kinds_pairs(client, name, items, partitions))
        client.flushall()  # each round starts from an empty server (functions stay loaded)
    client.close()
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Print each variant's median µs per dequeue+ack, and its ratios to the floor and to the
    library without kinds."""
    found = measured_on_own_redis(__doc__, argv, measure)
    mid = {name: median(values) for name, values in found.items()}
    for name, values in found.items():
        each = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name}: {mid[name]:.1f} µs per dequeue+ack (rounds: {each})")
    one_class = ratio(mid["library"], mid["floor"])
    verdict = "within" if one_class <= FLOOR_BAR else "NOT within"
    print(f"library / floor = {one_class:.2f} ({verdict} the {FLOOR_BAR}x bar)")
    for name in POOLS:
        to_floor, to_library = ratio(mid[name], mid["floor"]), ratio(mid[name], mid["library"])
        print(f"{name} / floor = {to_floor:.2f}, / library = {to_library:.2f}")
    return 0
