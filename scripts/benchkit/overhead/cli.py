"""The command line of `uv run scripts/bench.py [--only NAME ...] [--quick] [--json]`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console

from scripts.benchkit.host import log, machine
from scripts.benchkit.report import Report

Runner = Callable[[argparse.Namespace], list[Report]]
NAMES = ("throughput", "gap", "enqueue", "sse", "scaling")


def run_jobs(args: argparse.Namespace) -> list[Report]:
    """throughput and gap share their rounds: one run gives both reports."""
    from scripts.benchkit.overhead import jobs

    plan = jobs.Plan(
        rounds=args.rounds or (2 if args.quick else 6),
        jobs=args.jobs or (20 if args.quick else 2000),
        idle=3 if args.quick else 100,
        workers=args.workers,
        broker=args.broker,
    )
    samples = jobs.measure(plan)
    wanted = set(args.only)
    reports = []
    if "throughput" in wanted:
        reports.append(jobs.throughput_report(samples, plan))
    if "gap" in wanted:
        reports.append(jobs.gap_report(samples, plan))
    return reports


def run_enqueue(args: argparse.Namespace) -> list[Report]:
    """The enqueue benchmark."""
    from scripts.benchkit.overhead import enqueue

    plan = enqueue.Plan(
        rounds=args.rounds or (1 if args.quick else 5),
        seconds=0.3 if args.quick else 5.0,
        warmup_s=0.2 if args.quick else 2.0,
    )
    return [enqueue.report(enqueue.measure(plan), plan)]


def run_sse(args: argparse.Namespace) -> list[Report]:
    """The SSE benchmark."""
    from scripts.benchkit.overhead import sse

    plan = sse.Plan(
        streams=args.streams or (30 if args.quick else 5000),
        changes=3 if args.quick else 200,
        rounds=args.rounds or (1 if args.quick else 3),
    )
    return [sse.report(sse.measure(plan), plan)]


def run_scaling(args: argparse.Namespace) -> list[Report]:
    """The scaling benchmark."""
    from scripts.benchkit.overhead import scaling

    plan = scaling.plan_for(args.quick, args.ops)
    return [scaling.report(scaling.measure(plan), plan)]


def runners(only: Sequence[str]) -> list[Runner]:
    """What to run for the chosen benchmarks, each once."""
    chosen: list[Runner] = []
    if {"throughput", "gap"} & set(only):
        chosen.append(run_jobs)
    if "enqueue" in only:
        chosen.append(run_enqueue)
    if "sse" in only:
        chosen.append(run_sse)
    if "scaling" in only:
        chosen.append(run_scaling)
    return chosen


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="+", choices=NAMES, default=list(NAMES))
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--rounds", type=int, help="alternating rounds per variant")
    parser.add_argument("--jobs", type=int, help="jobs per throughput round")
    parser.add_argument("--workers", type=int, default=1, help="workers (throughput, gap)")
    parser.add_argument(
        "--broker", help="Celery's broker for throughput and gap (amqp://...: RabbitMQ)"
    )
    parser.add_argument("--streams", type=int, help="open streams per SSE round")
    parser.add_argument("--ops", type=int, help="jobs measured per scaling point")
    parser.add_argument("--save", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--replot", type=Path, help="only plot the results of a --save file")
    parser.add_argument("--plots", type=Path, help="write PNG plots into this folder")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen benchmarks and print their tables (or JSON)."""
    args = parse_args(argv)
    if args.replot:
        from scripts.benchkit.overhead import plots

        for path in plots.write(plots.from_saved(args.replot), args.plots or Path(".")):
            log(f"wrote {path}")
        return 0
    log(f"machine: {machine()}")
    console = Console(width=140)
    reports: list[Report] = []
    for runner in runners(args.only):
        done = runner(args)
        reports += done
        if not args.json:  # each benchmark's tables as soon as it has them
            for report in done:
                report.render(console)
        if args.save:
            args.save.write_text(json.dumps([r.as_json() for r in reports], indent=1))
    if args.plots:
        from scripts.benchkit.overhead import plots

        for path in plots.write(reports, args.plots):
            log(f"wrote {path}")
    if args.json:
        print(json.dumps([r.as_json() for r in reports], indent=1))
    return 0
