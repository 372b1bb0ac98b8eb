"""What kinds of consumer cost a dequeue+ack (docs/vtrr.md, "Kinds"; issue 41: a mixed fleet).

Variants side by side in alternating rounds on one Redis with functions, each pair's Redis time
read from INFO commandstats (usec per FCALL), over the same backlog shape as
scripts/benchkit/dequeue_floor.py (n items of `partitions` partitions, each partition keeping
items queued to the end of a round, so that no partition goes idle: the steady path):

- floor: dequeue_floor's two functions, the least any leased dequeue+ack costs;
- library: `FairQueue.dequeue()` then `ack()`, no kinds anywhere (a one-class fleet: its cost
  must stay within 2.3x the floor, as issue 26 left it); the same pairs as dequeue_floor's
  library variant, with the checks below;
- kind-0: a consumer of kind "a" over items that name no kinds (the full dequeue, which a
  consumer of a kind always takes, with no pool to look at);
- kind-1, kind-2, kind-4: a consumer of kind "a" over items spread evenly over 1, 2 or 4 pools
  that all name "a" (POOLS);
- a+b: consumers of kinds "a" and "b" in turn over 4 pools, 3 of which each may take.

Every lease is checked (outside the timed Redis calls) to be one its consumer may take, and a
lone consumer's leases to be spread evenly over the partitions, as fair order does: a variant
that leased otherwise stops the run with an error rather than print a number.

    uv run python scripts/bench_kinds.py --redis-server <a Redis 7 redis-server>

With --instructions, each variant runs one round (1,000 items of 100 partitions) on a
redis-server under callgrind instead, and prints its instructions per dequeue+ack: a count
that the machine's load does not move (needs valgrind).
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis

from app.vtrr import FairQueue, Item
from app.vtrr.wire import as_text
from scripts.benchkit.dequeue_floor import (
    fcall_usec,
    floor_backlog,
    floor_drain,
    load,
    measured_on_own_redis,
)
from scripts.benchkit.instructions import count, under_callgrind
from scripts.benchkit.stats import alternate, median, ratio

Pool = tuple[str, ...]
#: The pools each variant's items are spread over (None: no kinds), and its consumers' kinds.
POOLS: dict[str, tuple[Pool | None, ...]] = {
    "library": (None,),
    "kind-0": (None,),
    "kind-1": (("a",),),
    "kind-2": (("a",), ("a", "b")),
    "kind-4": (("a",), ("a", "b"), ("a", "c"), ("a", "b", "c")),
    "a+b": (("a",), ("b",), ("a", "b"), ("a", "b", "c")),
}
CONSUMERS: dict[str, tuple[str | None, ...]] = {"library": (None,), "a+b": ("a", "b")}
VARIANTS = ("floor", *POOLS)
#: The backlog of a count under callgrind (--instructions), which runs some 50 times slower.
INSTRUCTION_ITEMS, INSTRUCTION_PARTITIONS = 1000, 100
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


@dataclass(frozen=True)
class Round:
    """One variant's round, its backlog queued: the pairs to run, how many, and the check of
    what they leased (run after, outside what is measured)."""

    run: Callable[[], None]
    pairs: int
    check: Callable[[], None]


def prepared(client: redis.Redis, variant: str, n: int, partitions: int) -> Round:
    """Queue the variant's backlog; its round over it."""
    if variant == "floor":
        floor_backlog(client, n)
        return Round(lambda: floor_drain(client), n, lambda: None)
    pooled_backlog(client, variant, n, partitions)
    kinds = CONSUMERS.get(variant, ("a",))
    consumers = [FairQueue(client, variant, kind=kind) for kind in kinds]
    taken = n // partitions * partitions
    leased: Counter[str] = Counter()

    def pairs() -> None:
        for i in range(taken):
            consumer = consumers[i % len(consumers)]
            lease = consumer.dequeue()
            if lease is None:
                raise RuntimeError(f"{variant}: kind {consumer.kind} found nothing, pair {i}")
            partition, named, _ = lease.payload.split("|", 2)
            if named and consumer.kind not in named.split(","):
                raise RuntimeError(f"{variant}: kind {consumer.kind} leased an item of {named}")
            if not consumer.ack(lease.task_id, lease.token):
                raise RuntimeError(f"{variant}: the ack of {lease.task_id} was refused")
            leased[partition] += 1

    return Round(pairs, taken, lambda: check_steady(client, variant, partitions, leased))


def check_steady(client: redis.Redis, variant: str, partitions: int, leased: Counter[str]) -> None:
    """Raise unless every partition still has items queued (the round stayed on the steady
    path), and, for a lone consumer, unless each partition was leased as often (fair order)."""
    queued = FairQueue(client, variant).keys.partition_queued
    left = {as_text(key): int(v) for key, v in client.hgetall(queued).items()}
    idle = [f"p{p}" for p in range(partitions) if left.get(f"p{p}", 0) <= 0]
    if idle:
        raise RuntimeError(f"{variant}: partitions went idle, off the steady path: {idle}")
    if len(CONSUMERS.get(variant, ("a",))) == 1 and len(set(leased.values())) > 1:
        raise RuntimeError(f"{variant}: leases not spread evenly over partitions: {leased}")


#: How a bench's variant is set up for a round: its client, name, items and partitions.
Prepare = Callable[[redis.Redis, str, int, int], Round]


def measure(
    url: str,
    rounds: int,
    items: int,
    partitions: int,
    variants: Sequence[str] = VARIANTS,
    prepare: Prepare | None = None,
) -> dict[str, list[float]]:
    """Each variant's µs per dequeue+ack, a value per round, the variants alternating (another
    bench's variants too: `prepare`, its rounds)."""
    prepare = prepare or prepared
    client = redis.Redis.from_url(url)
    load(client)
    found: dict[str, list[float]] = {name: [] for name in variants}
    for _, name in alternate(rounds, variants):
        one = prepare(client, name, items, partitions)
        found[name].append(fcall_usec(client, one.run) / one.pairs)
        one.check()
        client.flushall()  # each round starts from an empty server (functions stay loaded)
    client.close()
    return found


def instructions(
    binary: str | None,
    items: int,
    partitions: int,
    variants: Sequence[str] = VARIANTS,
    prepare: Prepare | None = None,
) -> dict[str, float]:
    """Each variant's redis-server instructions per dequeue+ack, one round each under callgrind
    (scripts/benchkit/instructions.py): a count that the machine's load does not move. Another
    bench's variants may be counted the same way (`prepare`: its rounds; cards_cost's)."""
    if binary:
        os.environ["FAIRGPU_REDIS_SERVER"] = binary
    prepare = prepare or prepared
    found: dict[str, float] = {}
    with under_callgrind() as (client, pid, out):
        load(client)
        for name in variants:
            one = prepare(client, name, items, partitions)
            found[name] = count(pid, out, one.run) / one.pairs
            one.check()
            client.flushall()
    return found


def report(mid: dict[str, float], *, timed: bool) -> None:
    """Print the ratios of each variant's mid value to the floor's and the library's."""
    one_class = ratio(mid["library"], mid["floor"])
    verdict = "within" if one_class <= FLOOR_BAR else "NOT within"
    bar = f"{verdict} the {FLOOR_BAR}x bar" if timed else "the bar is on time, not instructions"
    print(f"library / floor = {one_class:.2f} ({bar})")
    for name in POOLS:
        if name != "library":
            to_floor, to_library = ratio(mid[name], mid["floor"]), ratio(mid[name], mid["library"])
            print(f"{name} / floor = {to_floor:.2f}, / library = {to_library:.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    """Print each variant's median µs per dequeue+ack (or with --instructions, its
    redis-server instructions), and its ratios to the floor and to the library without kinds."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--redis-server")
    known, _ = parser.parse_known_args(argv)  # the timed rounds read the rest
    if known.instructions:
        counted = instructions(known.redis_server, INSTRUCTION_ITEMS, INSTRUCTION_PARTITIONS)
        for name, value in counted.items():
            print(f"{name}: {value:,.0f} instructions per dequeue+ack")
        report(counted, timed=False)
        return 0
    found = measured_on_own_redis(__doc__, argv, measure)
    mid = {name: median(values) for name, values in found.items()}
    for name, values in found.items():
        each = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name}: {mid[name]:.1f} µs per dequeue+ack (rounds: {each})")
    report(mid, timed=True)
    return 0
