"""Benchmark the fair queue (app/vtrr) against a plain Redis list, on a throwaway redis-server.

How each point is measured, and what the columns mean: scripts/benchkit/queue_cost/measure.py
and docs/benchmarks.md.

    uv run python scripts/bench_vtrr.py                 # full run, about 3.5 minutes on 2 cores
    uv run python scripts/bench_vtrr.py --quick         # smoke test, a few seconds
    uv run python scripts/bench_vtrr.py --output /tmp/table.md
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import redis

from app.dev.redis_server import RedisServer
from scripts.benchkit.host import log
from scripts.benchkit.queue_cost.measure import SOCKET_TIMEOUT_S, Plan, run_plan
from scripts.benchkit.queue_cost.report import describe, table, verdict


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
        "--redis-server", help="redis-server binary (default: as app.dev.redis_server finds it)"
    )
    return parser.parse_args(argv)


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
            results = run_plan(client, plan, log)
            parts = [describe(client, plan, load_before), table(results), verdict(results)]
        finally:
            client.close()
    report = "\n\n".join(parts) + "\n"
    if args.output:
        args.output.write_text(report)
        log(f"wrote {args.output}")
    else:
        print(report, end="")
    return 0
