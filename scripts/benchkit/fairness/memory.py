"""The memory scenario of `scripts/load.py`: does fair share remember yesterday's burst?

Two accounts of share 1. First `memory-heavy` runs a burst of N jobs alone (X GPU-seconds) and
every job ends. Then a third account's job of BLOCKER_S takes every worker, and meanwhile both
submit 2N jobs, interleaved, heavy first, so that all of them wait together. The number that
matters: the GPU-seconds of light's jobs that started before heavy's first job of the second
round. Fair share with memory (FAIR_SHARE_HALF_LIFE_S, here an hour) owes light about X first,
less what the other workers start meanwhile; today's rule forgets the burst once heavy has
nothing queued, and so does a FIFO queue: both alternate from the first job.

It runs on three systems, one after the other: fairgpu without memory, fairgpu with it (a stack
each), and the FIFO baseline (on the first stack's Redis, database 1).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.benchkit.fairness.metrics import Run
from scripts.benchkit.fairness.runner import warm_up
from scripts.benchkit.fairness.scenarios import Account, JobSpec, Params, Scenario
from scripts.benchkit.fairness.systems import FairSystem, FifoSystem, System
from scripts.benchkit.polling import until

NAME = "memory"
HALF_LIFE_S = 3600.0
HEAVY, LIGHT = Account("memory-heavy"), Account("memory-light")
BLOCKER = Account("memory-blocker")
BLOCKER_S = 1.0  # long enough for both accounts' jobs to be queued before a worker frees
BURST = 20  # heavy's jobs in the first round, at scale 1
#: Whatever the scale, at least this many jobs of at least this long, so that the burst is
#: long against a dispatch (a smaller one is within the noise of which worker starts first).
MIN_BURST, MIN_JOB_S = 8, 0.05
ACCOUNTS = Scenario(
    name=NAME,
    summary="a burst, then both at once",
    accounts=(HEAVY, LIGHT, BLOCKER),
    streams=(),
    light=(),
)
#: With memory, light's service before heavy's next start is owed about X: at least this part
#: of it (the other workers start heavy's jobs a little early, one job each at most).
TARGET_SHARE = 0.8


@dataclass(frozen=True)
class Outcome:
    """What one system did: light's GPU-seconds started before heavy's first of round two, and
    the GPU-seconds heavy had used in round one."""

    system: str
    burst_s: float
    light_first_s: float

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _none_queued(system: System) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await system.queued() == 0

    return check


async def _round(system: System, spec: JobSpec, n: int) -> list[Run]:
    handles = [await system.submit(spec) for _ in range(n)]
    return await system.collect(handles, timeout_s=600)


async def _scenario(system: System, params: Params) -> Outcome:
    n = max(params.count(BURST), MIN_BURST)
    job_s = max(params.job_s, MIN_JOB_S)
    heavy = JobSpec(HEAVY.key(), HEAVY.name, job_s)
    light = JobSpec(LIGHT.key(), LIGHT.name, job_s)
    await warm_up(system)
    burst = await _round(system, heavy, n)
    blocker = JobSpec(BLOCKER.key(), BLOCKER.name, BLOCKER_S)
    blockers = [await system.submit(blocker) for _ in range(system.workers)]
    await until(_none_queued(system), 60, "the blockers started", every=0.01)
    handles = []
    for _ in range(2 * n):
        handles += [await system.submit(heavy), await system.submit(light)]
    runs = await system.collect(handles, timeout_s=600)
    await system.collect(blockers, timeout_s=60)
    heavy_first = min(r.started for r in runs if r.account == HEAVY.name)
    first = sum(r.duration for r in runs if r.account == LIGHT.name and r.started < heavy_first)
    await system.aclose()  # type: ignore[attr-defined]
    return Outcome(system.name, sum(r.duration for r in burst), first)


def run(params: Params) -> list[Outcome]:
    """The scenario on fairgpu without memory, with it, and on FIFO."""
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="memory-") as tmp:
        for label, half_life in (("fairgpu", None), ("fairgpu+memory", HALF_LIFE_S)):
            folder = Path(tmp) / label
            folder.mkdir()
            fair = FairSystem([ACCOUNTS], params.workers, folder, half_life_s=half_life)
            fair.start()
            try:
                outcome = asyncio.run(_scenario(fair, params))
                outcomes.append(Outcome(label, outcome.burst_s, outcome.light_first_s))
                if half_life is None:
                    fifo = FifoSystem(fair.redis_url, params.workers, folder)
                    fifo.start()
                    try:
                        outcomes.append(asyncio.run(_scenario(fifo, params)))
                    finally:
                        fifo.stop()
            finally:
                fair.stop()
    return outcomes


def met(outcomes: list[Outcome]) -> bool:
    """Whether fairgpu with memory gave light at least TARGET_SHARE of heavy's burst first."""
    remembered = next(o for o in outcomes if o.system == "fairgpu+memory")
    return remembered.light_first_s >= TARGET_SHARE * remembered.burst_s


def summary(outcomes: list[Outcome]) -> str:
    """One line for the console."""
    burst = outcomes[0].burst_s
    each = ", ".join(f"{o.system} {o.light_first_s:.2f} s" for o in outcomes)
    verdict = "met" if met(outcomes) else "missed"
    return (
        f"memory: heavy used {burst:.2f} GPU-s alone, then both queued at once; light's "
        f"GPU-s started before heavy's next job: {each} (target with memory >= "
        f"{TARGET_SHARE:.0%} of the burst: {verdict})"
    )


def timed(params: Params) -> tuple[list[Outcome], float]:
    """run() and how long it took."""
    began = time.monotonic()
    outcomes = run(params)
    return outcomes, time.monotonic() - began
