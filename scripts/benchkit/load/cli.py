"""Load test of a running fairgpu stack, over its HTTP API only.

    uv run python scripts/load.py              # 20 jobs: 90% short at 5 s, 10% long at 90 s
    uv run python scripts/load.py --jobs 10 --short-s 0.2 --long-s 0.5   # a quick run
    uv run python scripts/load.py --key default_api_key,team_api_key     # two accounts

It submits a seeded mix of short and long jobs (POST /enqueue-task, --concurrency requests at
a time, each with its own Idempotency-Key so a retry cannot queue a job twice), waits for them
by polling GET /task-status/{id}, and reports, from the timestamps the jobs return only:

- `N jobs in T s, throughput X jobs/min`, T from the first enqueued_at to the last finished_at;
- per queue: jobs, wait (started_at - enqueued_at) p50 and p95;
- per worker: jobs, busy seconds (finished_at - started_at, summed) and busy % of T;
- per account: jobs, wait p50 and p95, GPU-seconds (busy seconds of its jobs).

A 429 or 503 is retried after its Retry-After. Jobs that end FAILURE or REVOKED, or that were
not accepted or had not ended by --timeout, are listed with their error, and the exit status is
then 1. --json prints the per-job results as JSON instead of the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from scripts.benchkit.load import client, tables
from scripts.benchkit.load.jobs import Options, split_keys

DEFAULT_URL = "http://127.0.0.1:8000"


def parse_args(argv: Sequence[str] | None = None) -> Options:
    """Read the command line into Options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", default=os.environ.get("FAIRGPU_URL", DEFAULT_URL), help="API URL")
    p.add_argument(
        "--key",
        action="append",
        help="API key; repeat it or give a comma list to spread jobs over accounts "
        "(default: default_api_key)",
    )
    p.add_argument("--jobs", type=int, default=20, help="jobs to submit (default 20)")
    p.add_argument("--seed", type=int, default=42, help="seed of the job mix (default 42)")
    p.add_argument("--short-s", type=float, default=5.0, help="a short job's seconds (5)")
    p.add_argument("--long-s", type=float, default=90.0, help="a long job's seconds (90)")
    p.add_argument("--long-fraction", type=float, default=0.1, help="share of long jobs (0.1)")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight at once (8)")
    p.add_argument(
        "--timeout", type=float, help="longest wait for the jobs, s (default: all work + 60)"
    )
    p.add_argument("--poll-s", type=float, default=0.5, help="pause between status rounds")
    p.add_argument("--json", action="store_true", help="print per-job results as JSON")
    p.add_argument(
        "--scenario",
        help="run fairness scenarios on a stack of their own instead, fairgpu against FIFO "
        "(balanced, skew, sybil, weighted, trickle, burst, a comma list or all); see "
        "`--scenario all --help` and docs/fairness.md",
    )
    a = p.parse_args(argv)
    if a.jobs < 1 or a.concurrency < 1 or not 0 <= a.long_fraction <= 1:
        p.error("--jobs and --concurrency must be at least 1, --long-fraction in [0, 1]")
    return Options(
        url=a.url.rstrip("/"),
        keys=split_keys(a.key or ["default_api_key"]),
        jobs=a.jobs,
        seed=a.seed,
        short_s=a.short_s,
        long_s=a.long_s,
        long_fraction=a.long_fraction,
        concurrency=a.concurrency,
        timeout=a.timeout,
        poll_s=a.poll_s,
        json=a.json,
    )


def wants_scenarios(argv: Sequence[str]) -> bool:
    """Whether the command line asks for the fairness scenarios (--scenario)."""
    return any(a == "--scenario" or a.startswith("--scenario=") for a in argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the load test; 0 when every job succeeded, else 1. With --scenario, the fairness
    scenarios run instead (scripts/benchkit/fairness/cli.py says what they return)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if wants_scenarios(args):
        # Imported only when asked: the scenarios start a whole stack of their own.
        from scripts.benchkit.fairness.cli import main as scenarios_main

        return scenarios_main(args)
    opts = parse_args(args)
    outcomes = asyncio.run(client.run(opts))
    print(tables.as_json(outcomes) if opts.json else tables.render(outcomes))
    return 0 if all(o.succeeded for o in outcomes) else 1
