"""The mixed-fleet scenario of `scripts/load.py` (issue 41): three accounts on two classes of card.

The stack's catalog has `big` (80 GB, price 2.0) and `small` (24 GB, price 1.0) cards; its
CPU workers act as two big cards on host node-a and two small ones on node-b. Three accounts of
share 1 submit burn jobs of JOB_S: `mixed-big` a flood that needs 40 GB (only a big card may run
it), `mixed-any` jobs that name no need (either class; the catalog's order prefers the cheaper
small card), `mixed-small` jobs that ask for the small class. The same jobs run twice on the
same stack: a backlog (all submitted at once, interleaved), then steady arrivals (each account
keeps STEADY_DEPTH jobs outstanding).

What it reports, per account: the jobs' waits (queued to started), which class ran them, the
price-weighted GPU-seconds they used (run seconds x the class's price), and the account's share
of those over the contention window against the ideal share. The contention window runs from
the moment all three accounts have submitted to the moment the first of them has nothing left;
the ideal is the max-min fair split of the fleet's price-weighted capacity among the accounts,
each limited to the classes it may use (`ideal_shares`). It also checks that no job ran where
it may not, that each ran on a host of its class, and that each was billed once with the class
it ran on.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import statistics
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.dev.fleet import plan
from app.dev.stack import Stack
from app.fleet.catalog import Catalog
from scripts.benchkit.fairness.metrics import Run
from scripts.benchkit.fairness.runner import Driver, warm_up
from scripts.benchkit.fairness.scenarios import (
    Account,
    Batch,
    JobSpec,
    Params,
    Scenario,
    interleave,
    jobs,
)
from scripts.benchkit.fairness.systems import FairSystem, Handle, RunError
from scripts.benchkit.report import Report, Section
from scripts.benchkit.stats import median

NAME = "mixed"
CATALOG = {"big": {"memory_gb": 80, "price": 2.0}, "small": {"memory_gb": 24, "price": 1.0}}
PRICE = {name: float(spec["price"]) for name, spec in CATALOG.items()}
HOSTS = {"big": "node-a", "small": "node-b"}  # where each class's cards are
FLEET = ("big@node-a", "big@node-a", "small@node-b", "small@node-b")
BIG, ANY, SMALL = Account("mixed-big"), Account("mixed-any"), Account("mixed-small")
#: What each account's jobs say at submit (the body's `gpu`), and so the classes they may use.
NEEDS: dict[str, dict[str, Any] | None] = {
    BIG.name: {"min_memory_gb": 40},
    ANY.name: None,
    SMALL.name: {"classes": ["small"]},
}
MAY_USE = {BIG.name: ("big",), ANY.name: ("small", "big"), SMALL.name: ("small",)}
#: One second: the fair share charges at least a second a job, so shorter jobs would be charged
#: more than they use and the shares would measure the floor, not the scheduler.
JOB_S = 1.0
COLLECT_TIMEOUT_S = 600.0
JOBS = {BIG.name: 48, ANY.name: 32, SMALL.name: 32}  # at scale 1; the big-only flood is larger
MIN_JOBS = 3
#: The steady round: each account keeps this many jobs submitted and not finished (more than
#: the cards it could hold, so that it always has one queued), looking every STEADY_POLL_S.
STEADY_DEPTH, STEADY_POLL_S = 4, 0.1
BACKLOG, STEADY = "backlog", "steady"


@dataclass(frozen=True)
class Placed:
    """One finished job, its id, and where it ran."""

    job_id: str
    run: Run
    gpu_class: str
    host: str

    @property
    def weighted_s(self) -> float:
        """Its run's seconds times its class's price."""
        return (self.run.finished - self.run.started) * PRICE[self.gpu_class]


@dataclass(frozen=True)
class Row:
    """One account's line of the table."""

    account: str
    may_use: str
    jobs: int
    wait_mean_s: float
    wait_p50_s: float
    wait_max_s: float
    ran_on: str
    weighted_s: float
    window_weighted_s: float
    share: float
    ideal: float
    plain_share: float


@dataclass(frozen=True)
class Outcome:
    """One round's table, its contention window's length, and the checks (name -> how many
    jobs break it)."""

    arrivals: str
    rows: tuple[Row, ...]
    window_s: float
    checks: Mapping[str, int]

    def as_json(self) -> dict[str, Any]:
        return {
            "arrivals": self.arrivals,
            "rows": [r.__dict__ for r in self.rows],
            "window_s": self.window_s,
            "checks": dict(self.checks),
        }


def job_counts(params: Params) -> dict[str, int]:
    """Each account's jobs at the run's scale."""
    return {name: max(MIN_JOBS, params.count(n)) for name, n in JOBS.items()}


def scenario(params: Params) -> Scenario:
    """The backlog round: the three accounts' jobs, interleaved, all submitted at once."""
    counts = job_counts(params)
    groups = [jobs(a, counts[a.name], JOB_S) for a in (BIG, ANY, SMALL)]
    return Scenario(
        NAME,
        "big-only flood, any-card and small-only jobs on 2 big + 2 small cards",
        (BIG, ANY, SMALL),
        (Batch("all", interleave(groups)),),
        light=(),
    )


class FleetSystem(FairSystem):
    """A fairgpu stack whose workers act as the FLEET's cards, its jobs submitted with NEEDS."""

    def __init__(self, plan_of: Scenario, workdir: Path) -> None:
        super().__init__([plan_of], len(FLEET), workdir)
        catalog = json.dumps(CATALOG)
        settings = self.stack.settings.model_copy(update={"gpu_classes": catalog})
        fleet = plan(FLEET, None, Catalog.from_setting(catalog))
        self.stack = Stack(settings, use_given_redis=False, fleet=fleet, workdir=workdir / "fair")

    async def submit(self, spec: JobSpec) -> Handle:
        """POST /enqueue-task of a burn job (the typed body, which takes `gpu`) with the
        account's need, if it has one."""
        body: dict[str, Any] = {"type": "burn", "kind": spec.kind, "duration_s": spec.duration}
        need = NEEDS.get(spec.account)
        if need is not None:
            body["gpu"] = need
        reply = await self._http().post("/enqueue-task", json=body, headers={"X-API-Key": spec.key})
        if reply.status_code != 200:
            raise RunError(f"submit refused: HTTP {reply.status_code} {reply.text[:200]}")
        return Handle(spec, str(reply.json()["task_id"]))

    async def place(self, handle: Handle, run: Run) -> Placed:
        """Where a finished job ran, from its status's result."""
        result = (await self._status(handle))["result"]
        if not isinstance(result, dict) or result.get("gpu_class") not in PRICE:
            raise RunError(f"job {handle.job_id}: no class of the catalog in its result {result}")
        return Placed(handle.job_id, run, str(result["gpu_class"]), str(result["host"]))

    async def billed_classes(self, handles: Sequence[Handle]) -> dict[str, list[str]]:
        """Each job's bills' classes, from GET /billing-records of each key."""
        billed: dict[str, list[str]] = {}
        for key in sorted({h.spec.key for h in handles}):
            reply = await self._http().get(
                "/billing-records", params={"limit": 1000}, headers={"X-API-Key": key}
            )
            reply.raise_for_status()
            for record in reply.json():
                billed.setdefault(str(record["task_id"]), []).append(str(record["gpu_class"]))
        return billed


def ideal_shares(
    may_use: Mapping[str, Sequence[str]],
    capacity: Mapping[str, float],
    weights: Mapping[str, float],
) -> dict[str, float]:
    """The max-min fair split of the classes' capacity among accounts that may each use only
    some classes, as fractions of the whole. The group of accounts with the least capacity
    within its reach per unit of weight is the bottleneck: it takes all of that capacity, split
    by weight, and the others share what is left the same way (water-filling)."""
    left, classes, level = dict(may_use), set(capacity), {}
    while left:
        best: tuple[float, tuple[str, ...], set[str]] | None = None
        for size in range(1, len(left) + 1):
            for group in itertools.combinations(sorted(left), size):
                reach = classes.intersection(itertools.chain(*(left[a] for a in group)))
                each = sum(capacity[c] for c in reach) / sum(weights[a] for a in group)
                if best is None or each < best[0] - 1e-12:
                    best = (each, group, reach)
        assert best is not None
        each, group, reach = best
        for account in group:
            level[account] = each * weights[account]
            del left[account]
        classes -= reach
    total = sum(level.values())
    return {a: v / total if total else math.nan for a, v in level.items()}


def window(placed: Sequence[Placed]) -> tuple[float, float]:
    """The contention window: from the last account's first submission to the first
    account's last finish (empty when they do not overlap)."""
    accounts = {p.run.account for p in placed}
    start = max(min(p.run.enqueued for p in placed if p.run.account == a) for a in accounts)
    end = min(max(p.run.finished for p in placed if p.run.account == a) for a in accounts)
    return start, max(start, end)


def clipped_s(p: Placed, start: float, end: float) -> float:
    """The seconds of p's run within [start, end)."""
    return max(0.0, min(p.run.finished, end) - max(p.run.started, start))


def checks(placed: Sequence[Placed], billed: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """The invariants, as the number of jobs that break each (0 everywhere is right)."""
    by_class = {name: [p for p in placed if p.gpu_class == name] for name in PRICE}
    return {
        "big-only jobs on a small card": sum(p.run.account == BIG.name for p in by_class["small"]),
        "small-only jobs on a big card": sum(p.run.account == SMALL.name for p in by_class["big"]),
        "jobs on a class their account may not use": sum(
            p.gpu_class not in MAY_USE[p.run.account] for p in placed
        ),
        "jobs on a host without their class": sum(HOSTS[p.gpu_class] != p.host for p in placed),
        "jobs not billed once with the class they ran on": sum(
            list(billed.get(p.job_id, ())) != [p.gpu_class] for p in placed
        ),
    }


def analyse(
    arrivals: str, placed: Sequence[Placed], billed: Mapping[str, Sequence[str]]
) -> Outcome:
    """The table of a run: per account, waits, classes, price-weighted seconds and shares."""
    start, end = window(placed)
    cards = Counter(spec.partition("@")[0] for spec in FLEET)
    capacity = {name: cards[name] * price for name, price in PRICE.items()}
    ideal = ideal_shares(MAY_USE, capacity, {a: 1.0 for a in MAY_USE})
    inside = {a: 0.0 for a in MAY_USE}  # price-weighted seconds in the window
    plain = {a: 0.0 for a in MAY_USE}  # plain seconds in the window
    for p in placed:
        plain[p.run.account] += clipped_s(p, start, end)
        inside[p.run.account] += clipped_s(p, start, end) * PRICE[p.gpu_class]
    total_inside, total_plain = sum(inside.values()), sum(plain.values())
    rows = []
    for account in MAY_USE:
        mine = [p for p in placed if p.run.account == account]
        waits = [p.run.wait for p in mine]
        classes = Counter(p.gpu_class for p in mine)
        rows.append(
            Row(
                account=account,
                may_use=" or ".join(MAY_USE[account]),
                jobs=len(mine),
                wait_mean_s=statistics.fmean(waits) if waits else math.nan,
                wait_p50_s=median(waits),
                wait_max_s=max(waits, default=math.nan),
                ran_on=", ".join(f"{c} {classes[c]}" for c in PRICE if classes[c]),
                weighted_s=sum(p.weighted_s for p in mine),
                window_weighted_s=inside[account],
                share=inside[account] / total_inside if total_inside else math.nan,
                ideal=ideal[account],
                plain_share=plain[account] / total_plain if total_plain else math.nan,
            )
        )
    return Outcome(arrivals, tuple(rows), end - start, checks(placed, billed))


async def _keep_outstanding(system: FleetSystem, spec: JobSpec, n: int) -> list[Handle]:
    """Submit n jobs of spec, keeping STEADY_DEPTH of them submitted and not finished."""
    handles: list[Handle] = []
    outstanding: list[Handle] = []
    while len(handles) < n or outstanding:
        while len(outstanding) < STEADY_DEPTH and len(handles) < n:
            handles.append(await system.submit(spec))
            outstanding.append(handles[-1])
        await asyncio.sleep(STEADY_POLL_S)  # between looks at the account's jobs
        outstanding = [h for h in outstanding if not await system.finished(h)]
    return handles


async def _steady(system: FleetSystem, params: Params) -> tuple[list[Handle], list[Run]]:
    """The same jobs as the backlog's, each account keeping STEADY_DEPTH outstanding."""
    loops = [
        _keep_outstanding(system, JobSpec(a.key(), a.name, JOB_S), n)
        for a, n in zip((BIG, ANY, SMALL), job_counts(params).values(), strict=True)
    ]
    handles = [h for group in await asyncio.gather(*loops) for h in group]
    return handles, await system.collect(handles, timeout_s=COLLECT_TIMEOUT_S)


async def _run(system: FleetSystem, params: Params) -> list[Outcome]:
    await warm_up(system)
    driver = Driver(system, scenario(params))
    rounds = [(BACKLOG, driver.handles, await driver.run())]
    rounds.append((STEADY, *await _steady(system, params)))
    billed = await system.billed_classes([h for _, handles, _ in rounds for h in handles])
    outcomes = []
    for arrivals, handles, runs in rounds:
        placed = [await system.place(h, r) for h, r in zip(handles, runs, strict=True)]
        outcomes.append(analyse(arrivals, placed, billed))
    await system.aclose()
    return outcomes


def run(params: Params) -> list[Outcome]:
    """Both rounds on a stack of its own: the backlog, then the steady arrivals."""
    with tempfile.TemporaryDirectory(prefix="mixed-") as tmp:
        system = FleetSystem(scenario(params), Path(tmp))
        system.start()
        try:
            return asyncio.run(_run(system, params))
        finally:
            system.stop()


COLUMNS = (
    "arrivals",
    "account",
    "may run on",
    "jobs",
    "wait mean s",
    "wait p50 s",
    "wait max s",
    "ran on",
    "weighted GPU-s",
    "in window",
    "share",
    "ideal",
    "plain share",
)


def report(outcomes: Sequence[Outcome]) -> Report:
    """One table of both rounds, a summary line each, and the checks."""
    rows = [(o.arrivals, *r.__dict__.values()) for o in outcomes for r in o.rows]
    section = Section("each account's wait, cards and share", COLUMNS, rows)
    notes = [summary(o) for o in outcomes]
    for name in outcomes[0].checks:
        notes.append(f"{name}: {' + '.join(str(o.checks[name]) for o in outcomes)}")
    return Report(NAME, [section], notes=notes)


def summary(outcome: Outcome) -> str:
    """One line: each account's share in the window against its ideal, and the checks."""
    shares = ", ".join(f"{r.account} {r.share:.2f} (ideal {r.ideal:.2f})" for r in outcome.rows)
    wrong = sum(outcome.checks.values())
    return (
        f"mixed, {outcome.arrivals}: price-weighted shares over the {outcome.window_s:.1f} s "
        f"all three competed: {shares}; jobs where they may not run or billed wrongly: {wrong}"
    )
