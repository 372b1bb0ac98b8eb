"""Soak: many short jobs from several accounts while workers are SIGKILLed and restarted at random.

    uv run python scripts/soak.py --jobs 500 --workers 3 --seed 1

It starts a whole stack (Redis with its append-only file, the API, CPU workers, the periodic
reclaim) with a short lease, submits --jobs jobs over HTTP at --rate per second from three
accounts, and meanwhile SIGKILLs a random worker every --kill-every seconds and starts a fresh
one (with a new name) after --restart-after seconds, as a process manager would. When every job
has ended it checks, through the API and in Redis:

- lost: accepted jobs that did not end SUCCESS, or FAILURE with the attempts reason (a job whose
  workers were killed MAX_ATTEMPTS times), must be 0;
- billed twice: task ids that appear more than once in the billing lists, must be 0, and every
  SUCCESS is billed exactly once, every FAILURE never;
- both fair queues empty at the end (nothing queued, nothing in flight);

and reports the duplicate runs (jobs with attempts less preemptions > 1) and the recovery
times: from the SIGKILL of a worker to the restart of the job it was running. Exit status 0 when
all checks pass.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from app import connections
from app.dev.redis_server import free_port
from app.dev.sentinels import SentinelSet, sentinel_set
from app.dev.stack import Stack
from app.ledger.database import Database
from app.settings import Settings
from scripts.benchkit.host import ROOT
from scripts.benchkit.soak import traffic
from scripts.benchkit.soak.chaos import Chaos, PrimaryChaos
from scripts.benchkit.soak.checks import Findings, check


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=300, help="jobs to submit (default 300)")
    p.add_argument("--rate", type=float, default=10.0, help="jobs submitted per second")
    p.add_argument("--workers", type=int, default=3, help="workers running at once")
    p.add_argument("--min-s", type=float, default=0.05, help="shortest job duration")
    p.add_argument("--max-s", type=float, default=0.2, help="longest job duration")
    p.add_argument("--long-share", type=float, default=0.1, help="fraction of jobs in 'long'")
    p.add_argument("--kill-every", type=float, nargs=2, default=(2.0, 4.0), metavar=("MIN", "MAX"))
    p.add_argument(
        "--restart-after", type=float, nargs=2, default=(0.2, 1.5), metavar=("MIN", "MAX")
    )
    p.add_argument("--lease", type=float, default=2.0, help="LEASE_SECONDS")
    p.add_argument("--heartbeat", type=float, default=0.5, help="HEARTBEAT_SECONDS")
    p.add_argument("--reclaim", type=float, default=0.5, help="RECLAIM_INTERVAL_S")
    p.add_argument("--timeout", type=float, default=300.0, help="longest wait for the jobs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", type=Path, help="keep Redis and the logs here")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    p.add_argument(
        "--sentinel",
        action="store_true",
        help="run on 1 primary, 2 replicas and 3 Sentinels, and SIGKILL the primary once, a third "
        "of the way through the submits (restarted 2 s later)",
    )
    p.add_argument(
        "--min-replicas", type=int, default=None, help="REDIS_MIN_REPLICAS (default: its own)"
    )
    return p.parse_args(argv)


def run_on(
    stack: Stack,
    args: argparse.Namespace,
    rng: random.Random,
    found: Findings,
    ha: SentinelSet | None = None,
) -> None:
    """Submit under chaos, wait for the jobs to drain, and check what became of them."""
    r = connections.sync_client(stack.settings, decode_responses=True)
    chaos = Chaos(stack, rng, tuple(args.kill_every), tuple(args.restart_after))
    primary = None if ha is None else PrimaryChaos(ha, args.jobs / args.rate / 3, 2.0)
    chaos.start()
    if primary is not None:
        primary.start()
    submitting = time.monotonic()
    try:
        accepted = traffic.submit_all(stack.url, args, rng, found)
    finally:
        chaos.finish(args.workers)
        if primary is not None:
            primary.finish()
            found.primary_kills = int(primary.killed_at is not None)
    found.submit_s = round(time.monotonic() - submitting, 1)
    found.accepted, found.kills = len(accepted), len(chaos.kills)
    draining = time.monotonic()
    traffic.wait_until_ended(r, list(accepted), args.timeout)
    found.drain_s = round(time.monotonic() - draining, 1)
    ledger = Database(stack.settings.database)
    try:
        check(traffic.states_of(stack.url, accepted), r, ledger, chaos.kills, found)
    finally:
        ledger.close()
    r.close()


def soak(args: argparse.Namespace) -> Findings:
    """Run the soak; what it found."""
    rng = random.Random(args.seed)
    found = Findings(
        jobs=args.jobs, command="uv run python scripts/soak.py " + " ".join(sys.argv[1:])
    )
    settings = Settings(
        users_file=ROOT / "fixtures" / "users.json",
        database_url=None,  # the stack's own, seeded from the users file
        port=free_port(),
        lease_seconds=args.lease,
        heartbeat_seconds=args.heartbeat,
        reclaim_interval_s=args.reclaim,
    )
    if args.min_replicas is not None:
        settings = settings.model_copy(update={"redis_min_replicas": args.min_replicas})
    with tempfile.TemporaryDirectory(prefix="fairgpu-soak-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        with contextlib.ExitStack() as held:
            ha = None
            if args.sentinel:
                ha = held.enter_context(sentinel_set(workdir / "redis"))
                update = {"redis_sentinels": ha.addresses, "redis_url": "redis://127.0.0.1/0"}
                settings = settings.model_copy(update=update)
            found.min_replicas = settings.min_replicas
            stack = Stack(settings, use_given_redis=False, workers=args.workers, workdir=workdir)
            held.enter_context(stack)
            run_on(stack, args, rng, found, ha)
        found.wall_s = round(time.monotonic() - began, 1)
    return found


def main(argv: list[str] | None = None) -> int:
    """Run, print the figures (and write them with --json); 0 when every check passed."""
    args = parse(argv)
    found = soak(args)
    figures = found.summary()
    for name, value in figures.items():
        print(f"{name}: {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if found.ok else 1
