"""Drives a scenario's streams against one system and returns its jobs' timestamps."""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Sequence

from scripts.benchkit.fairness.metrics import Run
from scripts.benchkit.fairness.scenarios import (
    Batch,
    Flood,
    JobSpec,
    Scenario,
    Stream,
    Trickle,
    jobs_of,
)
from scripts.benchkit.fairness.systems import POLL_S, WARMUP, Handle, RunError, System
from scripts.benchkit.host import log
from scripts.benchkit.polling import until

WARMUP_S = 0.2
DRAIN_SLACK_S = 120.0


class Driver:
    """One run of a scenario on a system: the streams as concurrent tasks."""

    def __init__(self, system: System, scenario: Scenario) -> None:
        self.system = system
        self.scenario = scenario
        self.handles: list[Handle] = []
        self.done = {s.name: asyncio.Event() for s in scenario.streams}
        self.t0 = 0.0

    async def submit(self, spec: JobSpec) -> Handle:
        """Submit one job and keep its handle."""
        handle = await self.system.submit(spec)
        self.handles.append(handle)
        return handle

    async def _at(self, offset: float) -> None:
        """Sleep until offset seconds after the scenario's start."""
        await asyncio.sleep(max(0.0, self.t0 + offset - time.monotonic()))  # the schedule

    async def batch(self, stream: Batch) -> None:
        """Submit the batch in order, at its time."""
        if stream.after is not None:
            await self.done[stream.after].wait()
            await asyncio.sleep(stream.at)  # the batch's delay after that stream
        else:
            await self._at(stream.at)
        for spec in stream.jobs:
            await self.submit(spec)

    async def trickle(self, stream: Trickle) -> None:
        """One job at a time; the next after the last finished and a pause."""
        await self._at(stream.at)
        for _ in range(stream.n):
            handle = await self.submit(stream.job)
            finished = functools.partial(self.system.finished, handle)
            # The light user waits as long as it takes; collect() bounds the whole run.
            await until(finished, math.inf, "the trickle's job", every=POLL_S)
            await asyncio.sleep(stream.think)  # the light user's pause between jobs

    async def flood(self, stream: Flood) -> None:
        """Top the queue up to `depth` waiting jobs until the other stream is done."""
        while not self.done[stream.until].is_set():
            missing = stream.depth - await self.system.queued()
            for _ in range(missing):
                await self.submit(stream.job)
            await asyncio.sleep(POLL_S)  # between looks at the queue

    async def _stream(self, stream: Stream) -> None:
        try:
            if isinstance(stream, Batch):
                await self.batch(stream)
            elif isinstance(stream, Trickle):
                await self.trickle(stream)
            else:
                await self.flood(stream)
        finally:
            self.done[stream.name].set()

    async def run(self) -> list[Run]:
        """Run every stream, wait for every job, and return their timestamps."""
        self.t0 = time.monotonic()
        await asyncio.gather(*(self._stream(s) for s in self.scenario.streams))
        submitted = time.monotonic()
        work = sum(h.spec.duration for h in self.handles) / self.system.workers
        runs = await self.system.collect(self.handles, timeout_s=4 * work + DRAIN_SLACK_S)
        log(
            f"  {self.system.name}: {len(runs)} jobs, submitted in {submitted - self.t0:.1f} s, "
            f"done in {time.monotonic() - self.t0:.1f} s"
        )
        return runs


async def run_scenario(system: System, scenario: Scenario) -> list[Run]:
    """The scenario's jobs on this system, as Runs."""
    return await Driver(system, scenario).run()


async def warm_up(system: System, deadline_s: float = 60.0) -> None:
    """Run small jobs until every worker has run one, so no scenario waits for a start."""
    spec = JobSpec(WARMUP.key(), WARMUP.name, WARMUP_S)
    seen: set[str] = set()
    deadline = time.monotonic() + deadline_s
    while len(seen) < system.workers:
        if time.monotonic() > deadline:
            raise RunError(f"{system.name}: only workers {sorted(seen)} ran a job")
        handles = [await system.submit(spec) for _ in range(system.workers)]
        runs = await system.collect(handles, timeout_s=deadline_s)
        seen |= {r.worker for r in runs}


def all_specs(scenario: Scenario) -> Sequence[JobSpec]:
    """Every job template of a scenario (for sizes and checks)."""
    return [j for s in scenario.streams for j in jobs_of(s)]
