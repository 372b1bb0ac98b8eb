"""What a soak must find at the end, through the API and in Redis: nothing lost, nothing billed
twice, every SUCCESS billed once and every FAILURE never, both fair queues empty; and the
figures: duplicate runs and the recovery times from a worker's SIGKILL to its job's restart."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from app.ledger.database import Database
from app.ledger.outbox import bills_everywhere
from app.models import KINDS
from app.store.keys import events_key
from app.vtrr.keys import Keys
from scripts.benchkit.stats import median

ACCOUNTS = {
    "default_api_key": "11111111-1111-1111-1111-111111111111",
    "second_api_key": "22222222-2222-2222-2222-222222222222",
    "team_api_key": "33333333-3333-3333-3333-333333333333",
}
EXHAUSTED = "the worker running it was lost"


@dataclass
class Findings:
    """What a soak found; `ok` when nothing was lost or billed twice and the queues drained."""

    jobs: int = 0
    accepted: int = 0
    refused: int = 0
    kills: int = 0
    primary_kills: int = 0
    min_replicas: int = 0
    success: int = 0
    failed_after_attempts: int = 0
    lost: list[str] = field(default_factory=list)
    lost_states: Counter[str] = field(default_factory=Counter)
    billed_twice: list[str] = field(default_factory=list)
    success_not_billed_once: list[str] = field(default_factory=list)
    failure_billed: list[str] = field(default_factory=list)
    duplicate_runs: int = 0
    reruns_without_a_kill: int = 0
    recovery_s: list[float] = field(default_factory=list)
    drained: bool = False
    submit_s: float = 0.0
    drain_s: float = 0.0
    wall_s: float = 0.0
    command: str = ""

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return (
            self.drained
            and not self.lost
            and not self.billed_twice
            and not self.success_not_billed_once
            and not self.failure_billed
        )

    def summary(self) -> dict[str, Any]:
        """The figures, as printed and as written by --json."""
        recovery = sorted(self.recovery_s)
        return {
            **{k: v for k, v in asdict(self).items() if k not in ("recovery_s", "lost_states")},
            "lost": len(self.lost),
            "billed_twice": len(self.billed_twice),
            "success_not_billed_once": len(self.success_not_billed_once),
            "failure_billed": len(self.failure_billed),
            "lost_ids": self.lost[:20],
            "lost_states": dict(self.lost_states),
            "recoveries": len(recovery),
            "recovery_worst_s": round(recovery[-1], 2) if recovery else None,
            "recovery_median_s": round(median(recovery), 2) if recovery else None,
            "ok": self.ok,
        }


def starts_of(r: redis.Redis, task_id: str) -> list[tuple[str, float]]:
    """(worker, started_at) of each run of a job, in order, from its event stream."""
    runs: list[tuple[str, float]] = []
    for _, fields in r.xrange(events_key(task_id)):
        if fields.get("status") == "STARTED":
            run = (fields.get("worker", ""), float(fields["started_at"]))
            if not runs or runs[-1] != run:
                runs.append(run)
    return runs


def recoveries(runs: list[tuple[str, float]], kills: dict[str, float], found: Findings) -> None:
    """From each killed run of a job to its next run: kill -> restart, in seconds."""
    for (worker, started), (_, restarted) in itertools.pairwise(runs):
        killed = kills.get(worker)
        if killed is not None and killed >= started:
            found.recovery_s.append(restarted - killed)
        else:
            found.reruns_without_a_kill += 1


def billed_counts(r: redis.Redis, ledger: Database) -> Counter[str]:
    """How many bills each task id has, over the soak's accounts: in the ledger's outbox and
    in the SQL ledger (app.ledger.outbox.bills_everywhere)."""
    billed: Counter[str] = Counter()
    for user in ACCOUNTS.values():
        billed.update(bill.task_id for bill in bills_everywhere(r, ledger, user))
    return billed


def check(
    states: dict[str, dict[str, Any]],
    r: redis.Redis,
    ledger: Database,
    kills: dict[str, float],
    found: Findings,
) -> None:
    """Fill the findings from the client's view (the jobs' states over HTTP) and the
    operator's (Redis)."""
    billed = billed_counts(r, ledger)
    found.billed_twice = sorted(t for t, n in billed.items() if n > 1)
    for task_id, state in states.items():
        status, error = state["status"], state.get("error") or ""
        if status == "SUCCESS":
            found.success += 1
            if billed[task_id] != 1:
                found.success_not_billed_once.append(task_id)
        elif status == "FAILURE" and error.startswith(EXHAUSTED):
            found.failed_after_attempts += 1
            if billed[task_id]:
                found.failure_billed.append(task_id)
        else:
            found.lost.append(task_id)
            found.lost_states[f"{status} attempts={state.get('attempts')} {error}".strip()] += 1
        # a status's attempts counts preempted runs too: those are resumed, not run again
        if state.get("attempts", 0) - state.get("preemptions", 0) > 1:
            found.duplicate_runs += 1
            recoveries(starts_of(r, task_id), kills, found)
    found.drained = all(
        r.zcard(Keys.for_queue(kind).queue) == 0 and r.zcard(Keys.for_queue(kind).inflight) == 0
        for kind in KINDS
    )
