"""What the load test submits and what it learns of each job: the options, the seeded plan of
short and long jobs, and each job's outcome as the API reported it."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

TIMEOUT_SLACK_S = 60.0  # added to the total work for the default --timeout


@dataclass(frozen=True)
class Options:
    """The command line, parsed."""

    url: str
    keys: tuple[str, ...]
    jobs: int
    seed: int
    short_s: float
    long_s: float
    long_fraction: float
    concurrency: int
    timeout: float | None
    poll_s: float
    json: bool


@dataclass(frozen=True)
class JobSpec:
    """One job to submit: its place in the plan, the key that submits it, its queue and length."""

    index: int
    key: str
    kind: str
    duration_s: float


@dataclass
class Outcome:
    """What became of one job, as the API last reported it."""

    index: int
    key: str
    kind: str
    duration_s: float
    task_id: str | None = None
    status: str = "NOT_SUBMITTED"
    attempts: int = 0
    error: str | None = None
    worker: str | None = None
    gpu_id: int | None = None
    enqueued_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    account: str | None = None

    @property
    def succeeded(self) -> bool:
        """Whether it ended SUCCESS with all three timestamps."""
        return self.status == "SUCCESS" and None not in (
            self.enqueued_at,
            self.started_at,
            self.finished_at,
        )

    @property
    def wait_s(self) -> float:
        """Seconds from enqueued to started (0 when unknown)."""
        return (self.started_at or 0.0) - (self.enqueued_at or 0.0)

    @property
    def busy_s(self) -> float:
        """Seconds from started to finished (0 when unknown)."""
        return (self.finished_at or 0.0) - (self.started_at or 0.0)


def split_keys(values: Iterable[str]) -> tuple[str, ...]:
    """The keys of repeated and comma-separated --key values, in order, without repeats."""
    keys = (k.strip() for v in values for k in v.split(","))
    return tuple(dict.fromkeys(k for k in keys if k))


def plan_jobs(opts: Options) -> list[JobSpec]:
    """The seeded mix: round(jobs * long_fraction) long jobs at random places, the rest short,
    keys dealt in turn."""
    rng = random.Random(opts.seed)
    n_long = round(opts.jobs * opts.long_fraction)
    long_at = set(rng.sample(range(opts.jobs), n_long))
    return [
        JobSpec(
            index=i,
            key=opts.keys[i % len(opts.keys)],
            kind="long" if i in long_at else "short",
            duration_s=opts.long_s if i in long_at else opts.short_s,
        )
        for i in range(opts.jobs)
    ]


def default_timeout(plan: Sequence[JobSpec]) -> float:
    """Enough for one worker to run every job one after the other, plus slack."""
    return sum(spec.duration_s for spec in plan) + TIMEOUT_SLACK_S
