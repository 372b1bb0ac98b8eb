"""Soak: many short jobs from several accounts while workers are SIGKILLed and restarted at random.

    uv run python scripts/soak.py --jobs 500 --workers 3 --seed 1

It starts a whole stack (Redis with its append-only file, the API, CPU workers, the periodic
reclaim) with a short lease, submits --jobs jobs over HTTP at --rate per second from three
accounts, and meanwhile SIGKILLs a random worker every --kill-every seconds and starts a fresh
one (with a new name) after --restart-after seconds, as a process manager would. When every job
has ended it checks, through the API and in Redis:

- lost: accepted jobs that did not end SUCCESS, or FAILURE with the attempts reason (a job whose
  workers were killed MAX_ATTEMPTS times), must be 0;
- billed twice: task ids that appear more than once in the billing lists, must be 0, and every
  SUCCESS is billed exactly once, every FAILURE never;
- both fair queues empty at the end (nothing queued, nothing in flight);

and reports the duplicate runs (jobs with attempts > 1) and the recovery times: from the SIGKILL
of a worker to the restart of the job it was running. Exit status 0 when all checks pass.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from app.dev.redis_server import free_port
from app.dev.stack import Stack
from app.models import KINDS
from app.settings import Settings
from app.store.keys import billing_key, events_key, job_key
from app.vtrr.keys import Keys

ROOT = Path(__file__).resolve().parents[1]
ACCOUNTS = {
    "default_api_key": "11111111-1111-1111-1111-111111111111",
    "second_api_key": "22222222-2222-2222-2222-222222222222",
    "team_api_key": "33333333-3333-3333-3333-333333333333",
}
EXHAUSTED = "the worker running it was lost"
TERMINAL = {"SUCCESS", "FAILURE", "REVOKED"}


@dataclass
class Report:
    """What a soak found; `ok` when nothing was lost or billed twice and the queues drained."""

    jobs: int = 0
    accepted: int = 0
    refused: int = 0
    kills: int = 0
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
            "recovery_median_s": round(statistics.median(recovery), 2) if recovery else None,
            "ok": self.ok,
        }


class Chaos(threading.Thread):
    """SIGKILLs a random live worker every so often and starts a fresh one after a pause."""

    def __init__(
        self,
        stack: Stack,
        rng: random.Random,
        every: tuple[float, float],
        restart_after: tuple[float, float],
    ) -> None:
        super().__init__(name="chaos", daemon=True)
        self.stack, self.rng, self.every, self.restart_after = stack, rng, every, restart_after
        self.kills: dict[str, float] = {}  # full worker name (each is used once) -> kill time
        self._halt = threading.Event()
        self._next = len(stack.workers) + 1
        self._host = socket.gethostname()

    def run(self) -> None:
        while not self._halt.wait(self.rng.uniform(*self.every)):  # a deliberate pause
            alive = sorted(n for n, p in self.stack.workers.items() if p.poll() is None)
            if not alive:
                continue
            victim = self.rng.choice(alive)
            self.kills[f"{victim}@{self._host}"] = time.time()
            self.stack.kill_worker(victim)
            if self._halt.wait(self.rng.uniform(*self.restart_after)):  # the manager's delay
                return
            self.start_one()

    def start_one(self) -> None:
        """A fresh worker under a name never used before."""
        self.stack.start_worker(f"cpu{self._next}")
        self._next += 1

    def finish(self, workers: int) -> None:
        """Stop striking and bring the stack back to `workers` workers."""
        self._halt.set()
        self.join()
        while len(self.stack.workers) < workers:
            self.start_one()


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=300, help="jobs to submit (default 300)")
    p.add_argument("--rate", type=float, default=10.0, help="jobs submitted per second")
    p.add_argument("--workers", type=int, default=3, help="workers running at once")
    p.add_argument("--min-s", type=float, default=0.05, help="shortest job duration")
    p.add_argument("--max-s", type=float, default=0.2, help="longest job duration")
    p.add_argument("--long-share", type=float, default=0.1, help="fraction of jobs in 'long'")
    p.add_argument("--kill-every", type=float, nargs=2, default=(2.0, 4.0), metavar=("MIN", "MAX"))
    p.add_argument(
        "--restart-after", type=float, nargs=2, default=(0.2, 1.5), metavar=("MIN", "MAX")
    )
    p.add_argument("--lease", type=float, default=2.0, help="LEASE_SECONDS")
    p.add_argument("--heartbeat", type=float, default=0.5, help="HEARTBEAT_SECONDS")
    p.add_argument("--reclaim", type=float, default=0.5, help="RECLAIM_INTERVAL_S")
    p.add_argument("--timeout", type=float, default=300.0, help="longest wait for the jobs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", type=Path, help="keep Redis and the logs here")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    return p.parse_args(argv)


def polite(client: httpx.Client, method: str, path: str, key: str, **kwargs: Any) -> httpx.Response:
    """Send a request with the key; a 429 (over the key's rate limit) is sent again after a
    pause, for up to 30 s."""
    deadline = time.monotonic() + 30
    while True:
        reply = client.request(method, path, headers={"X-API-Key": key}, **kwargs)
        if reply.status_code != 429 or time.monotonic() > deadline:
            return reply
        time.sleep(0.2)  # over the key's rate limit: a polite client waits before retrying


def submit_all(
    stack: Stack, args: argparse.Namespace, rng: random.Random, report: Report
) -> dict[str, str]:
    """Submit the jobs at the chosen rate; task id -> API key of each accepted one."""
    accepted: dict[str, str] = {}
    start = time.monotonic()
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        for i in range(args.jobs):
            key = rng.choice(list(ACCOUNTS))
            kind = "long" if rng.random() < args.long_share else "short"
            body = {"kind": kind, "duration_s": round(rng.uniform(args.min_s, args.max_s), 3)}
            try:
                reply = polite(client, "POST", "/enqueue-task", key, json=body)
            except httpx.HTTPError:
                report.refused += 1
                continue
            if reply.status_code == 200:
                accepted[reply.json()["task_id"]] = key
            else:
                report.refused += 1
            pause = start + (i + 1) / args.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)  # pacing the submissions, not waiting for a condition
    return accepted


def wait_until_ended(r: redis.Redis, task_ids: list[str], timeout: float) -> None:
    """Poll the jobs' statuses in Redis until all have ended or the time is up."""
    deadline = time.monotonic() + timeout
    waiting = list(task_ids)
    while waiting and time.monotonic() < deadline:
        pipe = r.pipeline(transaction=False)
        for task_id in waiting:
            pipe.hget(job_key(task_id), "status")
        statuses = pipe.execute()
        waiting = [t for t, s in zip(waiting, statuses, strict=True) if s not in TERMINAL]
        if waiting:
            time.sleep(0.2)  # polling a condition with a deadline


def starts_of(r: redis.Redis, task_id: str) -> list[tuple[str, float]]:
    """(worker, started_at) of each run of a job, in order, from its event stream."""
    runs: list[tuple[str, float]] = []
    for _, fields in r.xrange(events_key(task_id)):
        if fields.get("status") == "STARTED":
            run = (fields.get("worker", ""), float(fields["started_at"]))
            if not runs or runs[-1] != run:
                runs.append(run)
    return runs


def check(
    stack: Stack, r: redis.Redis, accepted: dict[str, str], kills: dict[str, float], report: Report
) -> None:
    """Fill the report from the client's view (HTTP) and the operator's (Redis)."""
    states: dict[str, dict[str, Any]] = {}
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        for task_id, key in accepted.items():
            reply = polite(client, "GET", f"/task-status/{task_id}", key)
            states[task_id] = (
                reply.json()
                if reply.status_code == 200
                else {"status": f"HTTP {reply.status_code}", "error": reply.text[:200]}
            )
    billed: Counter[str] = Counter()
    for user in ACCOUNTS.values():
        billed.update(json.loads(x)["task_id"] for x in r.lrange(billing_key(user), 0, -1))
    report.billed_twice = sorted(t for t, n in billed.items() if n > 1)
    for task_id, state in states.items():
        status, error = state["status"], state.get("error") or ""
        if status == "SUCCESS":
            report.success += 1
            if billed[task_id] != 1:
                report.success_not_billed_once.append(task_id)
        elif status == "FAILURE" and error.startswith(EXHAUSTED):
            report.failed_after_attempts += 1
            if billed[task_id]:
                report.failure_billed.append(task_id)
        else:
            report.lost.append(task_id)
            report.lost_states[f"{status} attempts={state.get('attempts')} {error}".strip()] += 1
        if state.get("attempts", 0) > 1:
            report.duplicate_runs += 1
            recoveries(starts_of(r, task_id), kills, report)
    report.drained = all(
        r.zcard(Keys.for_queue(kind).queue) == 0 and r.zcard(Keys.for_queue(kind).inflight) == 0
        for kind in KINDS
    )


def recoveries(runs: list[tuple[str, float]], kills: dict[str, float], report: Report) -> None:
    """From each killed run of a job to its next run: kill -> restart, in seconds."""
    for (worker, started), (_, restarted) in itertools.pairwise(runs):
        killed = kills.get(worker)
        if killed is not None and killed >= started:
            report.recovery_s.append(restarted - killed)
        else:
            report.reruns_without_a_kill += 1


def soak(args: argparse.Namespace) -> Report:
    """Run the soak; the report of what it found."""
    rng = random.Random(args.seed)
    report = Report(
        jobs=args.jobs, command="uv run python scripts/soak.py " + " ".join(sys.argv[1:])
    )
    settings = Settings(
        users_file=ROOT / "fixtures" / "users.json",
        port=free_port(),
        lease_seconds=args.lease,
        heartbeat_seconds=args.heartbeat,
        reclaim_interval_s=args.reclaim,
    )
    with tempfile.TemporaryDirectory(prefix="fairgpu-soak-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        with Stack(settings, use_given_redis=False, workers=args.workers, workdir=workdir) as stack:
            r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
            chaos = Chaos(stack, rng, tuple(args.kill_every), tuple(args.restart_after))
            chaos.start()
            submitting = time.monotonic()
            try:
                accepted = submit_all(stack, args, rng, report)
            finally:
                chaos.finish(args.workers)
            report.submit_s = round(time.monotonic() - submitting, 1)
            report.accepted, report.kills = len(accepted), len(chaos.kills)
            draining = time.monotonic()
            wait_until_ended(r, list(accepted), args.timeout)
            report.drain_s = round(time.monotonic() - draining, 1)
            check(stack, r, accepted, chaos.kills, report)
            r.close()
        report.wall_s = round(time.monotonic() - began, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    """Run, print the figures (and write them with --json); 0 when every check passed."""
    args = parse(argv)
    report = soak(args)
    figures = report.summary()
    for name, value in figures.items():
        print(f"{name}: {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
