"""The queue benchmark's measurement: the fair queue (app/vtrr) against a plain Redis list.

For each point (queue depth, number of partitions) the queue is filled to that depth, then a
fixed number of operations is measured at that depth in chunks that keep the depth steady:
enqueue C single items (depth d -> d + C), then dequeue+ack C items (back to d). The baseline
does the same, in the same chunk, on a list of the same depth with the same payloads, on the
same server: LPUSH C payloads, then BRPOP C of them.

Each phase (C calls of one kind) is measured on its own: CONFIG RESETSTAT, the calls, then
INFO commandstats. The queue's operations run as FCALL (Redis 7) or EVALSHA (6.2), so Redis µs
per enqueue is the usec of those commands over the items, and per dequeue+ack the usec of both
calls over the items.
The medians over the chunks are robust to bursts of CPU contention on a shared machine; ops/s
is all operations over all their wall time, as one Python client sees them. "server CPU" is the
redis-server process's own user+sys CPU over the phase (INFO cpu), which adds the per-call
network and parsing work to the time spent inside the commands.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import redis

from app.vtrr import FairQueue, Item
from scripts.benchkit.stats import median

QUEUE_NAME = "bench"
LIST_KEY = "bench:baseline"
PREFILL_BATCH = 1000
CHUNK = 100
TARGET_US = 20.0
TARGET_GROWTH = 2.0
SOCKET_TIMEOUT_S = 300  # FLUSHALL of millions of items takes seconds; redis-py waits 5 s
ENQUEUE, DEQUEUE_ACK = "enqueue", "dequeue+ack"
SCRIPTS, SCRIPT_COMMANDS = "scripts", ("fcall", "evalsha")
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
        return median(self.redis_us)

    @property
    def cpu(self) -> float:
        """Median over the phases of redis-server process CPU µs per operation."""
        return median(self.cpu_us)


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
    """usec spent in a command since the last CONFIG RESETSTAT (INFO commandstats); the queue's
    operations are counted as FCALL on Redis 7 and EVALSHA on 6.2 (app/vtrr/scripts.py)."""
    stats = client.info("commandstats")
    names = SCRIPT_COMMANDS if command == SCRIPTS else (command,)
    return sum(float(stats.get(f"cmdstat_{name}", {}).get("usec", 0)) for name in names)


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
        (result.queue[ENQUEUE], SCRIPTS, lambda: enqueue_singles(queue, turn, batch)),
        (result.queue[DEQUEUE_ACK], SCRIPTS, lambda: dequeue_and_ack(queue, n)),
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
