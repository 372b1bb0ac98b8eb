"""What a fleet's cards cost a dequeue+ack (docs/vtrr.md, "Items of several cards"; issue 42).

Variants side by side in alternating rounds on one Redis with functions, over the backlog shape
of scripts/benchkit/kinds_cost.py (items of no kind, spread over partitions that stay queued to
the end of a round):

- floor: dequeue_floor's two functions, the least any leased dequeue+ack costs;
- library: `FairQueue.dequeue()` then `ack()` by a consumer without a card (issue 26's path);
- slotted: the same pairs by a consumer that stands for a card of a host (every fairgpu worker),
  with no item of several cards queued: its card is marked and freed with each item;
- reserved: the slotted consumer while an item of two cards waits at the head of the line with a
  reservation on its host that holds its card (the other card runs an item of a long span):
  each lease walks past that item and takes only items that end before the reservation starts.

Each lease is checked as kinds_cost checks its own (spread evenly over the partitions, none
gone idle); in `reserved`, the waiting item is never leased and its reservation stays.

    uv run python scripts/bench_cards.py --redis-server <a Redis 7 redis-server>

With --instructions, each variant runs one round under callgrind instead and prints its
redis-server instructions per dequeue+ack (as bench_kinds does; needs valgrind).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence

import redis

from app.vtrr import FairQueue, Item, Slot
from scripts.benchkit import kinds_cost
from scripts.benchkit.dequeue_floor import (
    floor_backlog,
    floor_drain,
    measured_on_own_redis,
)
from scripts.benchkit.kinds_cost import (
    FLOOR_BAR,
    INSTRUCTION_ITEMS,
    INSTRUCTION_PARTITIONS,
    Round,
    check_steady,
    instructions,
    payload,
)
from scripts.benchkit.stats import median, ratio

VARIANTS = ("floor", "library", "slotted", "reserved")
SPAN_S = 1.0  # each backlog item's span: it fits before the reservation's start
LONG_SPAN_S = 10**6  # what runs on the other card of the reserved host
TTL_S = 3600.0


def backlog(client: redis.Redis, name: str, n: int, partitions: int) -> None:
    """n items of `partitions` partitions (plus one each, left queued), each with a span."""
    queue = FairQueue(client, name)
    for p in range(partitions):
        items = [Item(payload(f"p{p}", None), span=SPAN_S) for _ in range(n // partitions + 1)]
        queue.enqueue(f"p{p}", items)


def consumer(client: redis.Redis, variant: str) -> FairQueue:
    """The variant's consumer; for `reserved`, with the waiting item and its reservation set."""
    if variant == "library":
        return FairQueue(client, variant)
    mine = FairQueue(client, variant, slot=Slot("h1", "0", "w0"))
    if variant == "reserved":
        other = FairQueue(client, variant, slot=Slot("h1", "1", "w1"))
        mine.tick(TTL_S)
        other.tick(TTL_S)
        other.enqueue("busy", [Item(payload("busy", None), id="busy", span=LONG_SPAN_S)])
        if other.dequeue() is None:
            raise RuntimeError("reserved: the other card leased nothing")
        mine.enqueue("pair", [Item(payload("pair", None), id="pair", size=2, span=SPAN_S)])
    return mine


def prepared(client: redis.Redis, variant: str, n: int, partitions: int) -> Round:
    """Queue the variant's backlog; its round over it."""
    if variant == "floor":
        floor_backlog(client, n)
        return Round(lambda: floor_drain(client), n, lambda: None)
    mine = consumer(client, variant)
    backlog(client, variant, n, partitions)
    if variant == "reserved":
        mine.tick(TTL_S)
        if "pair" not in mine.reservations():
            raise RuntimeError("reserved: the waiting item keeps no reservation")
    taken = n // partitions * partitions
    leased: Counter[str] = Counter()

    def pairs() -> None:
        for i in range(taken):
            lease = mine.dequeue()
            if lease is None or lease.task_id == "pair":
                raise RuntimeError(f"{variant}: pair {i} leased {lease}")
            if not mine.ack(lease.task_id, lease.token):
                raise RuntimeError(f"{variant}: the ack of {lease.task_id} was refused")
            leased[lease.payload.split("|", 1)[0]] += 1

    def check() -> None:
        check_steady(client, variant, partitions, leased)
        if variant == "reserved" and "pair" not in mine.reservations():
            raise RuntimeError("reserved: the reservation went away")

    return Round(pairs, taken, check)


def measure(url: str, rounds: int, items: int, partitions: int) -> dict[str, list[float]]:
    """Each variant's µs per dequeue+ack, a value per round, the variants alternating."""
    return kinds_cost.measure(url, rounds, items, partitions, VARIANTS, prepared)


def main(argv: Sequence[str] | None = None) -> int:
    """Print each variant's median µs per dequeue+ack (or with --instructions, its
    redis-server instructions) and its ratios to the floor and to the library."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--redis-server")
    known, _ = parser.parse_known_args(argv)  # the timed rounds read the rest
    if known.instructions:
        mid = instructions(
            known.redis_server, INSTRUCTION_ITEMS, INSTRUCTION_PARTITIONS, VARIANTS, prepared
        )
        for name, value in mid.items():
            print(f"{name}: {value:,.0f} instructions per dequeue+ack")
    else:
        found = measured_on_own_redis(__doc__, argv, measure)
        mid = {name: median(values) for name, values in found.items()}
        for name, values in found.items():
            each = ", ".join(f"{v:.1f}" for v in values)
            print(f"{name}: {mid[name]:.1f} µs per dequeue+ack (rounds: {each})")
    for name in VARIANTS[1:]:
        to_floor, to_library = ratio(mid[name], mid["floor"]), ratio(mid[name], mid["library"])
        verdict = "within" if to_floor <= FLOOR_BAR else "NOT within"
        bar = "" if name == "reserved" else f" ({verdict} the {FLOOR_BAR}x bar)"
        print(f"{name} / floor = {to_floor:.2f}{bar}, / library = {to_library:.2f}")
    return 0
