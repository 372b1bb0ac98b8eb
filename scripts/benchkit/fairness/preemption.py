"""The preemption scenario of `scripts/load.py`: how much sooner do short jobs start when the
long jobs that hold every GPU can be asked to yield? (docs/fairness.md, "Preemption")

`preempt-long` fills every worker with preemptible jobs of LONG_S (the `bench-steps` type of
scripts/benchkit/preempt_jobs.py, checkpointed after each step), more of them queued behind so
that the workers stay busy to the end. Once they run, two other accounts submit SHORTS burn
jobs of SHORT_S, alternately, one every GAP_S whatever has started. The number that matters is
the short jobs' wait, from submission to start.

It runs on two stacks of its own, one after the other: with preemption (PREEMPT_AFTER_S and
PREEMPT_MIN_RUN_S of seconds, not minutes, so that the run takes a minute or two) and without
(PREEMPT_AFTER_S far longer than the run). Every job must end SUCCESS and be billed exactly
once; one that is not raises RunError.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

from scripts.benchkit import preempt_jobs
from scripts.benchkit.fairness.runner import warm_up
from scripts.benchkit.fairness.scenarios import Account, JobSpec, Params, Scenario
from scripts.benchkit.fairness.systems import FairSystem, Handle, RunError
from scripts.benchkit.polling import until
from scripts.benchkit.report import Report, Section
from scripts.benchkit.stats import percentile, ratio

NAME = "preemption"
LONG = Account("preempt-long")
SHORT = (Account("preempt-short-a"), Account("preempt-short-b"))
ACCOUNTS = Scenario(
    name=NAME, summary="short jobs behind long ones", accounts=(LONG, *SHORT), streams=(), light=()
)
#: The policy's times with preemption on; off, PREEMPT_AFTER_S is OFF_AFTER_S.
AFTER_S, MIN_RUN_S, OFF_AFTER_S = 2.0, 3.0, 1e6
LONG_S, STEP_S = 20.0, 0.1  # a long job's work at scale 1, and its steps
#: Whatever the scale, long jobs at least this long: an ask needs AFTER_S + MIN_RUN_S.
MIN_LONG_S = 8.0
SHORT_S, SHORTS, MIN_SHORTS = 1.0, 12, 2  # the short jobs: seconds each, how many at scale 1
FIRST_S, GAP_S = 1.0, 3.0  # the first short job after the long ones start, then one every GAP_S
COLLECT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Plan:
    """The run's sizes at a scale: the short jobs, and the long jobs' work and number."""

    shorts: int
    long_s: float
    longs: int

    @classmethod
    def of(cls, params: Params) -> Plan:
        """Enough long jobs for every worker to be busy while the short ones come, and one more
        each, so that the long account always has one queued."""
        shorts = max(MIN_SHORTS, params.count(SHORTS))
        long_s = max(MIN_LONG_S, LONG_S * params.scale)
        each = math.ceil((FIRST_S + shorts * GAP_S) / long_s) + 1
        return cls(shorts, long_s, each * params.workers)


@dataclass(frozen=True)
class Outcome:
    """What one stack did: the short jobs' waits (seconds), the long jobs' preemptions, when the
    last long job ended (seconds after the first was submitted), and the jobs checked."""

    system: str
    shorts: int
    wait_p50_s: float
    wait_p99_s: float
    wait_max_s: float
    preemptions: int
    long_done_s: float
    jobs: int

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class PreemptSystem(FairSystem):
    """A fairgpu stack that loads `bench-steps` and runs the policy with the given times."""

    def __init__(self, name: str, workers: int, workdir: Path, after_s: float) -> None:
        super().__init__([ACCOUNTS], workers, workdir)
        self.name = name
        policy = {
            "job_modules": [preempt_jobs.__name__],
            "preempt_after_s": after_s,
            "preempt_min_run_s": MIN_RUN_S,
        }
        self.stack.settings = self.stack.settings.model_copy(update=policy)

    async def submit_steps(self, spec: JobSpec, work_s: float) -> Handle:
        """POST /enqueue-task for a bench-steps job of work_s seconds, its budget spec.duration."""
        steps = max(1, round(work_s / STEP_S))
        body = {
            "type": "bench-steps",
            "input": {"steps": steps, "step_s": STEP_S},
            "duration_s": spec.duration,
        }
        reply = await self._http().post("/enqueue-task", json=body, headers={"X-API-Key": spec.key})
        if reply.status_code != 200:
            raise RunError(f"submit refused: HTTP {reply.status_code} {reply.text[:200]}")
        return Handle(spec, str(reply.json()["task_id"]))

    async def preemptions(self, handles: Sequence[Handle]) -> int:
        """The jobs' preemptions, from their statuses."""
        return sum([int(str((await self._status(h))["preemptions"])) for h in handles])

    async def check_billed_once(self, handles: Sequence[Handle]) -> None:
        """RunError unless each job has exactly one bill (GET /billing-records of its key)."""
        bills: Counter[str] = Counter()
        for key in {h.spec.key for h in handles}:
            reply = await self._http().get(
                "/billing-records", params={"limit": 1000}, headers={"X-API-Key": key}
            )
            reply.raise_for_status()
            bills.update(str(record["task_id"]) for record in reply.json())
        wrong = {h.job_id: bills[h.job_id] for h in handles if bills[h.job_id] != 1}
        if wrong:
            raise RunError(f"{self.name}: jobs not billed exactly once (id: bills): {wrong}")


async def _scenario(system: PreemptSystem, plan: Plan) -> Outcome:
    await warm_up(system)
    # the budget: the work, and room for the runs that a preemption cuts short
    long = JobSpec(LONG.key(), LONG.name, 2 * plan.long_s + MIN_RUN_S, kind="long")
    began = time.time()
    longs = [await system.submit_steps(long, plan.long_s) for _ in range(plan.longs)]

    async def all_busy() -> bool:
        return await system.queued() == plan.longs - system.workers

    await until(all_busy, 60, "the long jobs started on every worker", every=0.05)
    t0 = time.monotonic()
    shorts = []
    for i in range(plan.shorts):
        await asyncio.sleep(max(0.0, t0 + FIRST_S + i * GAP_S - time.monotonic()))  # the schedule
        account = SHORT[i % len(SHORT)]
        shorts.append(await system.submit(JobSpec(account.key(), account.name, SHORT_S)))
    runs = await system.collect([*shorts, *longs], timeout_s=COLLECT_TIMEOUT_S)
    await system.check_billed_once([*shorts, *longs])
    waits = [r.wait for r in runs[: len(shorts)]]
    outcome = Outcome(
        system=system.name,
        shorts=len(shorts),
        wait_p50_s=percentile(waits, 50),
        wait_p99_s=percentile(waits, 99),
        wait_max_s=max(waits),
        preemptions=await system.preemptions(longs),
        long_done_s=max(r.finished for r in runs[len(shorts) :]) - began,
        jobs=len(runs),
    )
    await system.aclose()
    return outcome


def run(params: Params) -> list[Outcome]:
    """The scenario with preemption, then without: a stack each."""
    plan = Plan.of(params)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="preemption-") as tmp:
        for label, after_s in (("fairgpu+preemption", AFTER_S), ("fairgpu", OFF_AFTER_S)):
            folder = Path(tmp) / label
            folder.mkdir()
            system = PreemptSystem(label, params.workers, folder, after_s)
            system.start()
            try:
                outcomes.append(asyncio.run(_scenario(system, plan)))
            finally:
                system.stop()
    return outcomes


def report(outcomes: Sequence[Outcome]) -> Report:
    """The table of both stacks, and the ratios of their waits."""
    columns = [
        "system",
        "short jobs",
        "wait p50 s",
        "wait p99 s",
        "wait max s",
        "preemptions",
        "long jobs done at s",
        "jobs SUCCESS, billed once",
    ]
    rows = [astuple(o) for o in outcomes]  # the columns are the fields, in order
    section = Section("short jobs' wait, submission to start", columns, rows)
    return Report(NAME, [section], notes=[summary(outcomes)])


def summary(outcomes: Sequence[Outcome]) -> str:
    """One line: the waits without preemption over those with it."""
    on = next(o for o in outcomes if o.system == "fairgpu+preemption")
    off = next(o for o in outcomes if o.system == "fairgpu")
    return (
        f"preemption: short jobs' wait without / with preemption: p50 "
        f"{ratio(off.wait_p50_s, on.wait_p50_s):.1f}x, p99 "
        f"{ratio(off.wait_p99_s, on.wait_p99_s):.1f}x ({on.preemptions} preemptions; "
        f"PREEMPT_AFTER_S {AFTER_S:g}, PREEMPT_MIN_RUN_S {MIN_RUN_S:g})"
    )
