"""The queue benchmark's report: a Markdown table of every point, the two targets for
dequeue+ack checked, and a paragraph on the server and the machine."""

from __future__ import annotations

import os

import redis

from scripts.benchkit.queue_cost.measure import (
    CHUNK,
    DEQUEUE_ACK,
    OPS,
    TARGET_GROWTH,
    TARGET_US,
    Plan,
    PointResult,
)
from scripts.benchkit.report import met


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
    return "\n".join(
        [
            f"- Target 1: under {TARGET_US:.0f} µs of Redis time per dequeue+ack at the largest "
            f"depth. Worst there: {cost[worst]:.1f} µs (depth {worst[0]:,}, partitions "
            f"{worst[1]:,}): {met(cost[worst] < TARGET_US)}.",
            f"- Target 2: at most {TARGET_GROWTH:.0f}x the cost at the smallest point "
            f"({cost[smallest]:.1f} µs at depth {smallest[0]:,}, partitions {smallest[1]:,}). "
            f"Worst at the largest depth: {growth:.2f}x: {met(growth <= TARGET_GROWTH)}. "
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
