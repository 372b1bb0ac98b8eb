"""`scripts/load.py --scenario NAME`: the fairness scenarios, fairgpu against a FIFO baseline.

    uv run scripts/load.py --scenario all --plots docs/img      # every scenario, with plots
    uv run scripts/load.py --scenario skew,trickle --json       # JSON on stdout
    uv run scripts/load.py --scenario all --scale 0.02          # a tiny smoke run

It starts its own fairgpu stack (embedded Redis, the API, --workers CPU workers) and, on a
database of its own in the same Redis, as many plain Celery FIFO workers. Each scenario runs on
fairgpu, then the same streams on the FIFO workers, one after the other. Tables go to stdout,
or to stderr with --json, which then puts the JSON alone on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from scripts.benchkit.fairness import fleet, gangs, memory, preemption, report, reshare
from scripts.benchkit.fairness.analysis import Result, analyse, verdicts
from scripts.benchkit.fairness.runner import run_scenario, warm_up
from scripts.benchkit.fairness.scenarios import SCENARIOS, Params, Scenario
from scripts.benchkit.fairness.systems import FairSystem, FifoSystem, System
from scripts.benchkit.host import log


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The scenario command line."""
    p = argparse.ArgumentParser(
        prog="load.py",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument(
        "--scenario",
        required=True,
        help=f"a scenario, a comma list, or all: {', '.join([*SCENARIOS, reshare.NAME])}; "
        f"{memory.NAME} (three stacks of its own), {preemption.NAME} (two), {fleet.NAME} (a "
        f"mixed fleet, one), {gangs.BOUND} (two) and {gangs.SHARE} (one) run only when named",
    )
    p.add_argument("--scale", type=float, default=1.0, help="multiply job counts (default 1)")
    p.add_argument("--job-s", type=float, default=0.05, help="GPU-seconds per job (0.05)")
    p.add_argument("--workers", type=int, default=2, help="workers of each system (2)")
    p.add_argument("--json", action="store_true", help="JSON on stdout, tables on stderr")
    p.add_argument("--runs", action="store_true", help="put every job's timestamps in the JSON too")
    p.add_argument("--plots", type=Path, help="write the PNG plots into this folder")
    p.add_argument("--markdown", type=Path, help="also write the tables as Markdown here")
    a = p.parse_args(argv)
    names = [*SCENARIOS, reshare.NAME] if a.scenario == "all" else a.scenario.split(",")
    alone = (reshare.NAME, memory.NAME, preemption.NAME, fleet.NAME, gangs.BOUND, gangs.SHARE)
    unknown = [n for n in names if n not in SCENARIOS and n not in alone]
    if unknown:
        every = ", ".join([*SCENARIOS, *alone])
        p.error(f"unknown scenario(s) {unknown}; choose from {every} or all")
    a.reshare = reshare.NAME in names
    a.memory = memory.NAME in names
    a.preemption = preemption.NAME in names
    a.mixed = fleet.NAME in names
    a.gangs, a.gang_share = gangs.BOUND in names, gangs.SHARE in names
    names = [n for n in names if n not in alone]
    if a.scale <= 0 or a.job_s <= 0 or a.workers < 1:
        p.error("--scale and --job-s must be positive, --workers at least 1")
    a.names = names
    return a


async def run_all(
    systems: Sequence[System], scenarios: Sequence[Scenario], workers: int
) -> dict[str, dict[str, Result]]:
    """Warm both systems up, then each scenario on each system in turn."""
    for system in systems:
        await warm_up(system)
    out: dict[str, dict[str, Result]] = {}
    try:
        for scenario in scenarios:
            log(f"scenario {scenario.name}")
            out[scenario.name] = {
                s.name: analyse(s.name, scenario, await run_scenario(s, scenario), workers)
                for s in systems
            }
    finally:
        for system in systems:
            await system.aclose()  # type: ignore[attr-defined]
    return out


def measure(scenarios: Sequence[Scenario], workers: int) -> dict[str, dict[str, Result]]:
    """Start both systems, run the scenarios, stop both."""
    with tempfile.TemporaryDirectory(prefix="fairness-") as tmp:
        fair = FairSystem(scenarios, workers, Path(tmp))
        fair.start()
        fifo: FifoSystem | None = None
        try:
            fifo = FifoSystem(fair.redis_url, workers, Path(tmp))
            fifo.start()
            return asyncio.run(run_all([fair, fifo], scenarios, workers))
        finally:
            if fifo is not None:
                fifo.stop()
            fair.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen scenarios and report them: 0 once every job ran (the targets are in the
    report, not in the exit status: "zero idle GPU-seconds" cannot be met to the microsecond);
    a job that fails or never ends raises."""
    a = parse_args(argv)
    params = Params(job_s=a.job_s, scale=a.scale, workers=a.workers)
    scenarios = [SCENARIOS[n](params) for n in a.names]
    load_before = os.getloadavg()
    began = time.monotonic()
    results = measure(scenarios, a.workers) if scenarios else {}
    console = Console(stderr=a.json, width=140)
    run: dict[str, Any] = {
        "params": {"job_s": a.job_s, "scale": a.scale, "workers": a.workers},
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "seconds": time.monotonic() - began,
        },
        "scenarios": {},
    }
    md: list[str] = []
    for scenario in scenarios:
        res = results[scenario.name]
        checks = verdicts(scenario, res["fairgpu"].numbers)
        report.print_tables(console, scenario, res, checks)
        run["scenarios"][scenario.name] = report.scenario_json(scenario, res, checks, a.runs)
        md.append(report.markdown(scenario, res, checks))
        if a.plots is not None:
            for path in report.plot(scenario, res, a.plots):
                log(f"wrote {path}")
    run_alone(a, params, console, run, md)
    # the whole command's, the reshare scenario's stack too
    run["machine"].update(load_after=os.getloadavg(), seconds=time.monotonic() - began)
    if a.markdown is not None:
        a.markdown.write_text("\n\n".join(md) + "\n")
    if a.json:
        print(report.as_json(run))
    return 0


def run_alone(
    a: argparse.Namespace, params: Params, console: Console, run: dict[str, Any], md: list[str]
) -> None:
    """The scenarios that each run on stacks of their own, as they were named: their tables on
    the console, their JSON into run, their summary lines into md."""
    if a.reshare:  # fairgpu alone (a FIFO queue has no shares), on a stack of its own
        log("scenario reshare")
        changed, _ = reshare.timed(params, a.plots)
        console.print(reshare.summary(changed))
        run["scenarios"][reshare.NAME] = changed.as_json()
        md.append(f"**reshare**: {reshare.summary(changed).removeprefix('reshare: ')}.")
    if a.memory:  # fairgpu without memory, with it, and FIFO: a stack each
        log("scenario memory")
        remembered, _ = memory.timed(params)
        console.print(memory.summary(remembered))
        run["scenarios"][memory.NAME] = [o.as_json() for o in remembered]
        md.append(f"**memory**: {memory.summary(remembered).removeprefix('memory: ')}.")
    if a.preemption:  # with preemption and without: a stack each
        log("scenario preemption")
        outcomes = preemption.run(params)
        preemption.report(outcomes).render(console)
        run["scenarios"][preemption.NAME] = [o.as_json() for o in outcomes]
        md.append(f"**preemption**: {preemption.summary(outcomes).removeprefix('preemption: ')}.")
    if a.mixed:  # two classes of card, three accounts: a stack of its own
        log("scenario mixed")
        rounds = fleet.run(params)
        fleet.report(rounds).render(console)
        run["scenarios"][fleet.NAME] = [o.as_json() for o in rounds]
        md += [f"**mixed ({o.arrivals})**: {fleet.summary(o).split(': ', 1)[1]}." for o in rounds]
    if a.gangs or a.gang_share:  # jobs of several cards: a stack per round
        log("scenario gangs")
        bound = gangs.run_bound(params) if a.gangs else []
        share = gangs.run_share(params) if a.gang_share else None
        gangs.report(bound, share).render(console)
        run["scenarios"][gangs.BOUND] = {
            "bound": [r.as_json() for r in bound],
            "share": None if share is None else share.as_json(),
        }
        md += [f"**{gangs.BOUND}**: {gangs.summary(r).split(': ', 1)[1]}." for r in bound]
        if share is not None:
            md.append(f"**{gangs.SHARE}**: {gangs.share_summary(share).split(': ', 1)[1]}.")
