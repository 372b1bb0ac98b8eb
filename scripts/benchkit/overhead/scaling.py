"""How the cost per job grows with the queue's depth (1e3..1e6) and with accounts (1..1e5).

This reuses the queue benchmark's measurement (scripts/benchkit/queue_cost/, which
scripts/bench_vtrr.py runs): on one embedded redis-server the fair queue is filled to each
depth, spread over the given number of partitions (accounts), then single enqueues and
dequeue+acks are measured in chunks that keep the depth steady, each chunk followed
by the baseline's (LPUSH and BRPOP on a list of the same depth) so both see the same machine.
A job's cost here is its whole life in the queue, enqueue + dequeue + ack: the Redis time of the
scripts (INFO commandstats) and the redis-server process's CPU, medians over the chunks.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import redis

from scripts.benchkit.children import embedded_redis
from scripts.benchkit.host import log, machine
from scripts.benchkit.queue_cost import measure as queue_cost
from scripts.benchkit.report import Report, Section, met
from scripts.benchkit.stats import ratio

GROWTH_TARGET = 2.0  # the queue benchmark's target: at most 2x the smallest point's cost


@dataclass(frozen=True)
class Point:
    """The cost of one job at one (depth, accounts)."""

    depth: int
    accounts: int
    redis_us: float
    cpu_us: float
    base_us: float

    @classmethod
    def of(cls, result: queue_cost.PointResult) -> Point:
        """Sum enqueue and dequeue+ack, for the queue and the baseline."""
        q, b = result.queue, result.baseline
        return cls(
            result.depth,
            result.partitions,
            q[queue_cost.ENQUEUE].redis + q[queue_cost.DEQUEUE_ACK].redis,
            q[queue_cost.ENQUEUE].cpu + q[queue_cost.DEQUEUE_ACK].cpu,
            b[queue_cost.ENQUEUE].redis + b[queue_cost.DEQUEUE_ACK].redis,
        )


def plan_for(quick: bool, ops: int | None) -> queue_cost.Plan:
    """The sweep: every depth with 1 and with 1,000 accounts, every account count at 1e6."""
    if quick:
        return queue_cost.Plan((100, 1_000), 10, (1, 10, 100), ops or 100, 100)
    return queue_cost.Plan(
        (1_000, 10_000, 100_000, 1_000_000), 1_000, (1, 10, 1_000, 100_000), ops or 2_000, 100
    )


def measure(plan: queue_cost.Plan) -> list[Point]:
    """Run the sweep on a fresh embedded redis-server."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp,
        embedded_redis(Path(tmp)) as rs,
    ):
        client = redis.Redis.from_url(rs.url, socket_timeout=queue_cost.SOCKET_TIMEOUT_S)
        try:
            results = queue_cost.run_plan(client, plan, log)
        finally:
            client.close()
    return [Point.of(r) for r in results]


def report(points: list[Point], plan: queue_cost.Plan) -> Report:
    """One row per point: µs per job, the baseline's, and growth against the smallest point."""
    first = min(points, key=lambda p: (p.depth, p.accounts))
    columns = ("depth", "accounts", "Redis µs/job", "server CPU µs/job", "list µs/job",
               "ratio to list", "growth", "growth / list's")  # fmt: skip
    rows = [
        (p.depth, p.accounts, p.redis_us, p.cpu_us, p.base_us, ratio(p.redis_us, p.base_us),
         ratio(p.redis_us, first.redis_us),
         ratio(ratio(p.redis_us, p.base_us), ratio(first.redis_us, first.base_us)))
        for p in points
    ]  # fmt: skip
    largest = max(p.depth for p in points)
    worst = max(ratio(p.redis_us, first.redis_us) for p in points if p.depth == largest)
    result = Report("scaling", [Section("cost per job (enqueue + dequeue + ack)", columns, rows)])
    result.notes = [
        f"{machine()}; {plan.ops:,} jobs per point in chunks of up to {queue_cost.CHUNK}",
        f"worst growth at depth {largest:,} over depth {first.depth:,} with {first.accounts} "
        f"account: {worst:.2f}x (at most {GROWTH_TARGET:g}x): {met(worst <= GROWTH_TARGET)}",
    ]
    result.data = {"points": [p.__dict__ for p in points]}
    return result
