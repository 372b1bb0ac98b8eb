"""Benchmark the fair queue (app/vtrr) against a plain Redis list, on a throwaway redis-server.

For each point (queue depth, number of partitions) the queue is filled to that depth, then a
fixed number of operations is measured at that depth in chunks that keep the depth steady:
enqueue C single items (depth d -> d + C), then dequeue+ack C items (back to d). The baseline
does the same, in the same chunk, on a list of the same depth with the same payloads, on the
same server: LPUSH C payloads, then BRPOP C of them.

Each phase (C calls of one kind) is measured on its own: CONFIG RESETSTAT, the calls, then
INFO commandstats. The queue's scripts run as EVALSHA, so Redis µs per enqueue is the usec of
cmdstat_evalsha over the items, and per dequeue+ack the usec of both calls over the items.
The table gives the median over the chunks (robust to bursts of CPU contention on a shared
machine); ops/s is all operations over all their wall time, as one Python client sees them.
"server CPU" is the redis-server process's own user+sys CPU over the phase (INFO cpu), which
adds the per-call network and parsing work to the time spent inside the commands.

    uv run python scripts/bench_vtrr.py                 # full run, about 3.5 minutes on 2 cores
    uv run python scripts/bench_vtrr.py --quick         # smoke test, a few seconds
    uv run python scripts/bench_vtrr.py --output /tmp/table.md
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from app.dev.redis_server import RedisServer
from app.vtrr import FairQueue, Item

QUEUE_NAME = "bench"
LIST_KEY = "bench:baseline"
PREFILL_BATCH = 1000
CHUNK = 100
TARGET_US = 20.0
TARGET_GROWTH = 2.0
SOCKET_TIMEOUT_S = 300  # FLUSHALL of millions of items takes seconds; redis-py waits 5 s
ENQUEUE, DEQUEUE_ACK = "enqueue", "dequeue+ack"
OPS = (ENQUEUE, DEQUEUE_ACK)


@dataclass(frozen=True)
class Plan:
    """What to measure: the depth sweep, the partition sweep, and how much work per point."""

    depths: tuple[int, ...]
    spread: int
    partitions: tuple[int, ...]
    ops: int
    payload_bytes: int

    def points(self) -> list[tuple[int, int]]:
        """Every (depth, partitions) to measure, grouped by partitions, depths ascending.

        The depth sweep runs with one partition and with `spread` partitions (at most one per
        item); the partition sweep runs at the largest depth.
        """
        largest = max(self.depths)
        wanted = {(d, 1) for d in self.depths}
        wanted |= {(d, min(self.spread, d)) for d in self.depths}
        wanted |= {(largest, p) for p in self.partitions if p <= largest}
        return sorted(wanted, key=lambda point: (point[1], point[0]))


@dataclass
class Tally:
    """The measured phases of one kind of operation at one point."""

    ops: int = 0
    seconds: float = 0.0
    redis_us: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)

    def add(self, ops: int, seconds: float, redis_usec: float, cpu_seconds: float) -> None:
        """Record one phase of ops operations."""
        self.ops += ops
        self.seconds += seconds
        self.redis_us.append(redis_usec / ops)
        self.cpu_us.append(cpu_seconds * 1e6 / ops)

    @property
    def ops_per_s(self) -> float:
        """Operations per second as the client saw them, over all phases."""
        return self.ops / self.seconds if self.seconds else 0.0

    @property
    def redis(self) -> float:
        """Median over the phases of Redis µs per operation (INFO commandstats)."""
        return statistics.median(self.redis_us) if self.redis_us else 0.0

    @property
    def cpu(self) -> float:
        """Median over the phases of redis-server process CPU µs per operation."""
        return statistics.median(self.cpu_us) if self.cpu_us else 0.0


def _tallies() -> dict[str, Tally]:
    return {op: Tally() for op in OPS}


@dataclass
class PointResult:
    """The tallies of one point: the queue's two operations and the baseline's two."""

    depth: int
    partitions: int
    queue: dict[str, Tally] = field(default_factory=_tallies)
    baseline: dict[str, Tally] = field(default_factory=_tallies)


class Payloads:
    """Distinct payloads of a fixed size, the same sequence for the queue and the baseline."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._n = itertools.count()

    def take(self, n: int) -> list[str]:
        """The next n payloads."""
        return [f"job-{next(self._n):012d}-".ljust(self.size, "x") for _ in range(n)]


def partition_name(index: int) -> str:
    """The key of partition number index."""
    return f"account-{index:06d}"


def server_cpu(client: redis.Redis) -> float:
    """Seconds of CPU (user + sys) the redis-server process has used."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def command_usec(client: redis.Redis, command: str) -> float:
    """usec spent in one command since the last CONFIG RESETSTAT (INFO commandstats)."""
    stats = client.info("commandstats")
    return float(stats.get(f"cmdstat_{command}", {}).get("usec", 0))


def measure(
    client: redis.Redis, tally: Tally, command: str, ops: int, work: Callable[[], None]
) -> None:
    """Run work as one measured phase of ops operations; its Redis time is that of command."""
    client.config_resetstat()
    cpu_before = server_cpu(client)
    start = time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    cpu = server_cpu(client) - cpu_before
    tally.add(ops, seconds, command_usec(client, command), cpu)


def enqueue_singles(queue: FairQueue, partitions: Iterator[int], payloads: list[str]) -> None:
    """Enqueue each payload as its own call, the partitions taking turns."""
    for payload in payloads:
        queue.enqueue(partition_name(next(partitions)), [Item(payload)])


def dequeue_and_ack(queue: FairQueue, n: int) -> None:
    """Lease and ack n items, one after the other."""
    for _ in range(n):
        lease = queue.dequeue()
        if lease is None:
            raise RuntimeError("the queue ran dry during a measurement")
        queue.ack(lease.task_id, lease.token)


def list_push(client: redis.Redis, payloads: list[str]) -> None:
    """LPUSH each payload as its own call."""
    for payload in payloads:
        client.lpush(LIST_KEY, payload)


def list_pop(client: redis.Redis, n: int) -> None:
    """BRPOP n payloads, one call each."""
    for _ in range(n):
        if client.brpop([LIST_KEY], timeout=1) is None:
            raise RuntimeError("the baseline list ran dry during a measurement")


def grow(queue: FairQueue, partitions: int, added: int, payloads: Payloads) -> None:
    """Add items spread evenly over the partitions (up to PREFILL_BATCH per call), and as many
    payloads to the baseline list.

    Filling partition by partition gives the same queue as round-robin, one item at a time:
    an item's start time depends only on its place within its own partition.
    """
    client = queue.redis
    for index in range(partitions):
        count = added // partitions + (1 if index < added % partitions else 0)
        for start in range(0, count, PREFILL_BATCH):
            batch = payloads.take(min(PREFILL_BATCH, count - start))
            queue.enqueue(partition_name(index), [Item(p) for p in batch])
            client.lpush(LIST_KEY, *batch)


def measure_point(
    queue: FairQueue, partitions: int, depth: int, ops: int, payloads: Payloads
) -> PointResult:
    """Measure ops enqueues and dequeue+acks, and the baseline's, at a steady depth."""
    result = PointResult(depth, partitions)
    turn = itertools.cycle(range(partitions))
    chunk = max(1, min(CHUNK, depth // 4))
    for done in range(0, ops, chunk):
        measure_chunk(queue, result, turn, payloads.take(min(chunk, ops - done)))
    check_depth(queue, depth)
    return result


def measure_chunk(
    queue: FairQueue, result: PointResult, turn: Iterator[int], batch: list[str]
) -> None:
    """One round of the four phases, each of len(batch) operations; the depth ends as it began."""
    client, n = queue.redis, len(batch)
    phases: list[tuple[Tally, str, Callable[[], None]]] = [
        (result.queue[ENQUEUE], "evalsha", lambda: enqueue_singles(queue, turn, batch)),
        (result.queue[DEQUEUE_ACK], "evalsha", lambda: dequeue_and_ack(queue, n)),
        (result.baseline[ENQUEUE], "lpush", lambda: list_push(client, batch)),
        (result.baseline[DEQUEUE_ACK], "brpop", lambda: list_pop(client, n)),
    ]
    for tally, command, work in phases:
        measure(client, tally, command, n, work)


def check_depth(queue: FairQueue, depth: int) -> None:
    """Fail loudly unless the queue and the list hold depth items and nothing is in flight."""
    lengths = (queue.length(), int(queue.redis.llen(LIST_KEY)), queue.pending())
    if lengths != (depth, depth, 0):
        raise RuntimeError(f"expected (depth, depth, 0) = ({depth}, {depth}, 0), got {lengths}")


def run_plan(client: redis.Redis, plan: Plan, log: Callable[[str], None]) -> list[PointResult]:
    """Measure every point of the plan; each partition count starts from an empty database and
    grows the same queue from one depth to the next."""
    results: list[PointResult] = []
    payloads = Payloads(plan.payload_bytes)
    for partitions, group in itertools.groupby(plan.points(), key=lambda point: point[1]):
        client.flushall()
        queue = FairQueue(client, QUEUE_NAME)
        current = 0
        for depth, _ in group:
            started = time.perf_counter()
            grow(queue, partitions, depth - current, payloads)
            current = depth
            check_depth(queue, depth)
            filled = time.perf_counter()
            results.append(measure_point(queue, partitions, depth, plan.ops, payloads))
            log(
                f"depth {depth:>9,} partitions {partitions:>7,}: "
                f"fill {filled - started:5.1f}s, measure {time.perf_counter() - filled:5.1f}s"
            )
    return results


def table(results: list[PointResult]) -> str:
    """The results as a markdown table."""
    lines = [
        "| depth | partitions | op | ops/s | Redis µs/op | server CPU µs/op "
        "| baseline ops/s | baseline µs/op | ratio |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        for op in OPS:
            mine, base = res.queue[op], res.baseline[op]
            ratio = mine.redis / base.redis if base.redis else float("inf")
            lines.append(
                f"| {res.depth:,} | {res.partitions:,} | {op} | {mine.ops_per_s:,.0f} "
                f"| {mine.redis:.1f} | {mine.cpu:.1f} | {base.ops_per_s:,.0f} "
                f"| {base.redis:.2f} | {ratio:.1f}x |"
            )
    return "\n".join(lines)


def verdict(results: list[PointResult]) -> str:
    """The two targets for dequeue+ack, and whether they are met.

    The largest points are those at the largest depth (every partition count); the smallest
    point is the smallest depth with one partition. Growth is also given normalised by the
    baseline measured in the same chunks, which cancels most CPU contention from elsewhere.
    """
    cost = {(r.depth, r.partitions): r.queue[DEQUEUE_ACK].redis for r in results}
    base = {(r.depth, r.partitions): r.baseline[DEQUEUE_ACK].redis for r in results}
    largest_depth = max(depth for depth, _ in cost)
    smallest = min(cost)
    worst = max((p for p in cost if p[0] == largest_depth), key=lambda p: cost[p])
    growth = cost[worst] / cost[smallest]
    normalised = max(
        (cost[p] / base[p]) / (cost[smallest] / base[smallest])
        for p in cost
        if p[0] == largest_depth
    )
    met = {True: "met", False: "NOT met"}
    return "\n".join(
        [
            f"- Target 1: under {TARGET_US:.0f} µs of Redis time per dequeue+ack at the largest "
            f"depth. Worst there: {cost[worst]:.1f} µs (depth {worst[0]:,}, partitions "
            f"{worst[1]:,}): {met[cost[worst] < TARGET_US]}.",
            f"- Target 2: at most {TARGET_GROWTH:.0f}x the cost at the smallest point "
            f"({cost[smallest]:.1f} µs at depth {smallest[0]:,}, partitions {smallest[1]:,}). "
            f"Worst at the largest depth: {growth:.2f}x: {met[growth <= TARGET_GROWTH]}. "
            f"Normalised by the baseline (worst ratio column there over the smallest point's): "
            f"{normalised:.2f}x.",
        ]
    )


def describe(client: redis.Redis, plan: Plan, load_before: float) -> str:
    """One paragraph on the server, the machine and the run's settings."""
    server = client.info("server")
    memory = client.info("memory")
    return (
        f"Redis {server['redis_version']} ({memory.get('mem_allocator', '?')}), "
        f"{os.cpu_count()} CPU cores, load average {load_before:.2f} before and "
        f"{os.getloadavg()[0]:.2f} after the run; {plan.ops:,} operations of each kind per "
        f"point, in chunks of up to {CHUNK}; {plan.payload_bytes}-byte payloads."
    )


def make_plan(args: argparse.Namespace) -> Plan:
    """The plan for the command line: --quick or the full sweep, cut at --max-depth."""
    depths: tuple[int, ...]
    partitions: tuple[int, ...]
    if args.quick:
        depths, spread, partitions, ops = (100, 1_000), 10, (1, 10, 100), 100
    else:
        depths = (1_000, 10_000, 100_000, 1_000_000)
        spread, partitions, ops = 1_000, (1, 10, 1_000, 100_000), 4_000
    if args.max_depth is not None:
        depths = tuple(d for d in depths if d <= args.max_depth) or (int(args.max_depth),)
    return Plan(depths, spread, partitions, args.ops or ops, args.payload_bytes)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny depths, few ops: a smoke test")
    parser.add_argument("--max-depth", type=int, help="leave out the depths above this one")
    parser.add_argument("--ops", type=int, help="operations of each kind per point")
    parser.add_argument("--payload-bytes", type=int, default=100, help="size of each payload")
    parser.add_argument("--output", type=Path, help="markdown file to write (default: stdout)")
    parser.add_argument(
        "--redis-server", help="redis-server binary (default: as app.redis_server finds it)"
    )
    return parser.parse_args(argv)


def log_line(line: str) -> None:
    """Progress, on stderr."""
    print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Start a fresh redis-server, run the plan, and print or write the report."""
    args = parse_args(argv)
    plan = make_plan(args)
    if args.redis_server:
        os.environ["FAIRGPU_REDIS_SERVER"] = args.redis_server
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as server:
        client = redis.Redis.from_url(server.url, socket_timeout=SOCKET_TIMEOUT_S)
        try:
            results = run_plan(client, plan, log_line)
            parts = [describe(client, plan, load_before), table(results), verdict(results)]
        finally:
            client.close()
    report = "\n\n".join(parts) + "\n"
    if args.output:
        args.output.write_text(report)
        log_line(f"wrote {args.output}")
    else:
        print(report, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
