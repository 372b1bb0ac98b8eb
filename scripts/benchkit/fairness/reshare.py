"""The reshare scenario of `scripts/load.py`: an account's share changes while both accounts
have a deep backlog, and its service rate follows the new share from the next job on.

Two accounts, `reshare-a` and `reshare-b`, share 1 each, queue N jobs each (interleaved); once a
third of them have started, an admin raises b's share to 3 (`PATCH /admin/accounts/reshare-b`).
Each job's start (Redis's clock) gives the order the workers took them in. The report says b's
share of the starts before and after the change, and how far from the new share (3/4) the
starts after it ever were, counted in jobs: |b's starts among the first n - 3n/4|, at its
worst while both accounts still had jobs queued. fairgpu only: a FIFO queue has no shares.
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
    n = params.count(JOBS)
    ids: dict[str, str] = {}
    for _ in range(n):
        for account in ACCOUNTS:
            body = {"kind": "short", "duration_s": params.job_s}
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
    b = ACCOUNTS[1]
    before, after = owners[:change], owners[change:]
    # Only while both accounts still have jobs: once a's (or b's) run out, the other runs alone.
    both = len(after)
    for end in range(len(after), 0, -1):
        if set(after[end - 1 :]) == set(ACCOUNTS):
            both = end
            break
    worst, count = 0.0, 0
    for i, owner in enumerate(after[:both], 1):
        count += owner == b
        worst = max(worst, abs(count - i * AFTER / (AFTER + BEFORE)))
    share_after = sum(o == b for o in after[:both]) / both if both else 0.0
    return Outcome(
        jobs=len(owners),
        changed_after=change,
        b_share_before=sum(o == b for o in before) / len(before) if before else 0.0,
        b_share_after=share_after,
        worst_jobs_off=round(worst, 2),
        owners=owners,
        change_index=change,
    )


def plot(outcome: Outcome, out_dir: Path) -> Path:
    """fairness-reshare.png: b's share of the starts so far, against the share it is owed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "fairness-reshare.png"
    b = ACCOUNTS[1]
    fig, ax = plt.subplots(figsize=(9, 4))
    xs, ys = [], []
    seen = 0
    for i, owner in enumerate(outcome.owners, 1):
        seen += owner == b
        xs.append(i)
        ys.append(seen)
    ax.plot(xs, ys, label="reshare-b's starts (measured)")
    c = outcome.change_index
    owed = [i * 0.5 if i <= c else c * 0.5 + (i - c) * AFTER / (AFTER + BEFORE) for i in xs]
    owed = [min(o, seen) for o in owed]  # until b has no job left
    ax.plot(xs, owed, "--", label="owed: 1/2, then 3/4 of the starts")
    ax.axvline(c, color="grey", linestyle=":", label="share 1 -> 3")
    ax.set(
        title="reshare: an account's share raised mid-backlog",
        xlabel="jobs started (both accounts)",
        ylabel="of which reshare-b's",
    )
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summary(outcome: Outcome) -> str:
    """One line for the console."""
    return (
        f"reshare: {outcome.jobs} jobs; b's share of the starts {outcome.b_share_before:.2f} "
        f"before the change (owed 0.50), {outcome.b_share_after:.2f} after it (owed 0.75); "
        f"at worst {outcome.worst_jobs_off:g} jobs off the new share after the change"
    )


def timed(params: Params, plots: Path | None) -> tuple[Outcome, float]:
    """run() and how long it took."""
    began = time.monotonic()
    outcome = run(params, plots)
    return outcome, time.monotonic() - began
