"""The reshare scenario of `scripts/load.py`: an account's share changes while both accounts
have a deep backlog, and its service rate follows the new share from the next job on.

Two accounts, `reshare-a` and `reshare-b`, share 1 each, queue N jobs each (interleaved; at
least MIN_JOBS of at least MIN_JOB_S, whatever the scale); once a
third of them have started, an admin raises b's share to 3 (`PATCH /admin/accounts/reshare-b`).
Each job's start (Redis's clock) gives the order the workers took them in. The report says, over
the starts while both accounts still had jobs queued: b's share of the starts before and after
the change, and in the first WINDOW starts after it; how far from the new share (3/4) the starts
after it ever were, counted in jobs (|b's starts among the first n - 3n/4|, at its worst); and
how many jobs started after the change before that distance stayed within one job for good.
fairgpu only: a FIFO queue has no shares.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.dev.processes import wait_until
from app.dev.redis_server import free_port
from app.dev.stack import Stack
from app.settings import Settings
from scripts.benchkit.fairness.scenarios import Params

NAME = "reshare"
BEFORE, AFTER = 1.0, 3.0
ADMIN = "reshare-admin"
ACCOUNTS = ("reshare-a", "reshare-b")
JOBS = 150  # each account's, at scale 1
#: Whatever the scale, at least this many jobs each, of at least this long: a smaller backlog
#: (6 jobs of 20 ms at the smoke test's scale) could all have started before the change landed.
MIN_JOBS, MIN_JOB_S = 12, 0.05
WINDOW = 20  # starts right after the change whose share is reported on its own
OWED_AFTER = AFTER / (AFTER + BEFORE)  # b's share of the starts once the change holds


def key(account: str) -> str:
    return f"{account}-key"


def users() -> dict[str, object]:
    """The scenario's accounts file: the two accounts, and an admin to change a share."""
    listed = [{"user_id": a, "api_keys": [key(a)], "share": BEFORE} for a in ACCOUNTS]
    listed.append({"user_id": ADMIN, "api_keys": [key(ADMIN)], "admin": True})
    return {"accounts": listed}


@dataclass(frozen=True)
class Outcome:
    """What the scenario measured."""

    jobs: int
    changed_after: int  # jobs started before the change
    b_share_before: float
    b_share_after: float
    worst_jobs_off: float  # the worst |b's starts - 3/4 of the starts| after the change
    b_share_window: float  # b's share of the first WINDOW starts after the change
    settled_after: int  # starts after the change before b stayed within one job of 3/4
    owners: list[str]  # who each start was for, in start order
    change_index: int  # the first start after the change

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "owners"}


def run(params: Params, plots: Path | None = None) -> Outcome:
    """Start a stack, run the scenario, stop it; plot into plots when given."""
    with tempfile.TemporaryDirectory(prefix="reshare-") as tmp:
        folder = Path(tmp)
        (folder / "users.json").write_text(json.dumps(users()))
        settings = Settings(
            users_file=folder / "users.json",
            database_url=None,  # the stack's own, seeded from this users file
            port=free_port(),
            rate_limit_per_s=0,
        )
        (folder / "stack").mkdir()
        with (
            Stack(
                settings, use_given_redis=False, workers=params.workers, workdir=folder / "stack"
            ) as stack,
            httpx.Client(base_url=stack.url, timeout=30) as http,
        ):
            outcome = _scenario(http, params)
    if plots is not None:
        plot(outcome, plots)
    return outcome


def _scenario(http: httpx.Client, params: Params) -> Outcome:
    n = max(params.count(JOBS), MIN_JOBS)
    ids: dict[str, str] = {}
    for _ in range(n):
        for account in ACCOUNTS:
            body = {"kind": "short", "duration_s": max(params.job_s, MIN_JOB_S)}
            reply = http.post("/enqueue-task", json=body, headers={"X-API-Key": key(account)})
            reply.raise_for_status()
            ids[reply.json()["task_id"]] = account
    total = len(ids)

    def queued() -> int:
        return int(sum(http.get("/health").json()["queues"].values()))

    wait_until(lambda: queued() <= total - total // 3, 300, "a third of the jobs to start")
    reply = http.patch(
        f"/admin/accounts/{ACCOUNTS[1]}", json={"share": AFTER}, headers={"X-API-Key": key(ADMIN)}
    )
    reply.raise_for_status()
    # The queues were charged again before that answer. (This clock is the machine's, Redis's
    # too: the benchmark runs on one machine.)
    changed_at = time.time()

    def done() -> bool:
        return queued() == 0 and _all_ended(http, ids)

    wait_until(done, 600, "every job to end")
    starts = sorted(
        (_started_at(http, task_id, account), account) for task_id, account in ids.items()
    )
    owners = [account for _, account in starts]
    change = next((i for i, (at, _) in enumerate(starts) if at >= changed_at), len(starts))
    return _outcome(owners, change)


def _all_ended(http: httpx.Client, ids: dict[str, str]) -> bool:
    last = list(ids)[-2:]  # the last of each account: the queues are empty, these end last
    return all(_state(http, t, ids[t])["status"] == "SUCCESS" for t in last)


def _state(http: httpx.Client, task_id: str, account: str) -> dict[str, Any]:
    reply = http.get(f"/task-status/{task_id}", headers={"X-API-Key": key(account)})
    reply.raise_for_status()
    state: dict[str, Any] = reply.json()
    return state


def _started_at(http: httpx.Client, task_id: str, account: str) -> float:
    return float(_state(http, task_id, account)["result"]["started_at"])


def _outcome(owners: list[str], change: int) -> Outcome:
    before, after = owners[:change], owners[change:]
    after = after[: _both_queued(after)]
    offs = _jobs_off(after)
    late = [i for i, off in enumerate(offs, 1) if off > 1]
    window = after[:WINDOW]
    return Outcome(
        jobs=len(owners),
        changed_after=change,
        b_share_before=_share(before),
        b_share_after=_share(after),
        worst_jobs_off=round(max(offs, default=0.0), 2),
        b_share_window=_share(window),
        settled_after=max(late, default=0),
        owners=owners,
        change_index=change,
    )


def _share(owners: list[str]) -> float:
    """b's part of these starts (0 for none)."""
    return sum(o == ACCOUNTS[1] for o in owners) / len(owners) if owners else 0.0


def _both_queued(after: list[str]) -> int:
    """How many of the starts after the change came while both accounts still had jobs: up to
    the last job of the one that ran out first (after it, the other runs alone)."""
    for end in range(len(after), 0, -1):
        if set(after[end - 1 :]) == set(ACCOUNTS):
            return end
    return len(after)


def _jobs_off(after: list[str]) -> list[float]:
    """After each start since the change: |b's starts so far - the 3/4 it is owed|, in jobs."""
    offs, count = [], 0
    for i, owner in enumerate(after, 1):
        count += owner == ACCOUNTS[1]
        offs.append(abs(count - i * OWED_AFTER))
    return offs


def plot(outcome: Outcome, out_dir: Path) -> Path:
    """fairness-reshare.png: b's starts so far against what it is owed (above), and how many
    jobs it is ahead of or behind that, counted from the change once it is made (below)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "fairness-reshare.png"
    fig, (total, off) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    owners, c = outcome.owners, outcome.change_index
    xs = list(range(1, len(owners) + 1))
    seen = _running_count(owners)
    owed = [min(_owed(i, c), seen[-1]) for i in xs]  # capped once b has no job left
    total.plot(xs, seen, label="reshare-b's starts (measured)")
    total.plot(xs, owed, "--", label="owed: 1/2, then 3/4 of the starts")
    total.set(title="reshare: an account's share raised mid-backlog", ylabel="of which b's")
    # below: while both accounts have jobs queued, before the change and after it
    both = c + _both_queued(owners[c:])
    before = [seen[i - 1] - i / 2 for i in xs[:c]]
    base = seen[c - 1] if c else 0  # b's starts before the change
    after = [seen[i - 1] - base - (i - c) * OWED_AFTER for i in xs[c:both]]
    off.plot(xs[:both], before + after, label="b's starts - owed, in jobs (from the change on)")
    off.axhspan(-1, 1, color="green", alpha=0.1, label="within one job")
    off.set(xlabel="jobs started (both accounts)", ylabel="jobs ahead (+) / behind (-)")
    off.set_ylim(-2, 2)
    for ax in (total, off):
        ax.axvline(c, color="grey", linestyle=":", label="share 1 -> 3")
        ax.legend(loc="upper left" if ax is total else "lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _running_count(owners: list[str]) -> list[int]:
    """b's starts among the first 1, 2, ... starts."""
    counts, seen = [], 0
    for owner in owners:
        seen += owner == ACCOUNTS[1]
        counts.append(seen)
    return counts


def _owed(i: int, change: int) -> float:
    """b's starts owed among the first i: half of them, then 3/4 of those after the change."""
    return min(i, change) * 0.5 + max(0, i - change) * OWED_AFTER


def summary(outcome: Outcome) -> str:
    """One line for the console."""
    return (
        f"reshare: {outcome.jobs} jobs; b's share of the starts {outcome.b_share_before:.2f} "
        f"before the change (owed 0.50), {outcome.b_share_after:.2f} after it (owed 0.75), "
        f"{outcome.b_share_window:.2f} in the first {WINDOW} after it; at worst "
        f"{outcome.worst_jobs_off:g} jobs off the new share after the change, and within one "
        f"job of it for good after {outcome.settled_after} jobs"
    )


def timed(params: Params, plots: Path | None) -> tuple[Outcome, float]:
    """run() and how long it took."""
    began = time.monotonic()
    outcome = run(params, plots)
    return outcome, time.monotonic() - began
