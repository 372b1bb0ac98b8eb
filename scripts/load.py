"""Load test of a running fairgpu stack, over its HTTP API only.

    uv run python scripts/load.py              # 20 jobs: 90% short at 5 s, 10% long at 90 s
    uv run python scripts/load.py --jobs 10 --short-s 0.2 --long-s 0.5   # a quick run
    uv run python scripts/load.py --key default_api_key,team_api_key     # two accounts

It submits a seeded mix of short and long jobs (POST /enqueue-task, --concurrency requests at
a time, each with its own Idempotency-Key so a retry cannot queue a job twice), waits for them
by polling GET /task-status/{id}, and reports, from the timestamps the jobs return only:

- `N jobs in T s, throughput X jobs/min`, T from the first enqueued_at to the last finished_at;
- per queue: jobs, wait (started_at - enqueued_at) p50 and p95;
- per worker: jobs, busy seconds (finished_at - started_at, summed) and busy % of T;
- per account: jobs, wait p50 and p95, GPU-seconds (busy seconds of its jobs).

A 429 or 503 is retried after its Retry-After. Jobs that end FAILURE or REVOKED, or that were
not accepted or had not ended by --timeout, are listed with their error, and the exit status is
then 1. --json prints the per-job results as JSON instead of the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"
TERMINAL = frozenset({"SUCCESS", "FAILURE", "REVOKED"})
RETRYABLE = frozenset({429, 503})
MAX_TRIES = 30  # per request; a 429 or 503 waits its Retry-After between tries
MAX_PAUSE_S = 30.0  # the longest Retry-After honoured as given
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


# --- the command line and the plan ------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> Options:
    """Read the command line into Options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", default=os.environ.get("FAIRGPU_URL", DEFAULT_URL), help="API URL")
    p.add_argument(
        "--key",
        action="append",
        help="API key; repeat it or give a comma list to spread jobs over accounts "
        "(default: default_api_key)",
    )
    p.add_argument("--jobs", type=int, default=20, help="jobs to submit (default 20)")
    p.add_argument("--seed", type=int, default=42, help="seed of the job mix (default 42)")
    p.add_argument("--short-s", type=float, default=5.0, help="a short job's seconds (5)")
    p.add_argument("--long-s", type=float, default=90.0, help="a long job's seconds (90)")
    p.add_argument("--long-fraction", type=float, default=0.1, help="share of long jobs (0.1)")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight at once (8)")
    p.add_argument(
        "--timeout", type=float, help="longest wait for the jobs, s (default: all work + 60)"
    )
    p.add_argument("--poll-s", type=float, default=0.5, help="pause between status rounds")
    p.add_argument("--json", action="store_true", help="print per-job results as JSON")
    p.add_argument(
        "--scenario",
        help="run fairness scenarios on a stack of their own instead, fairgpu against FIFO "
        "(balanced, skew, sybil, weighted, trickle, burst, a comma list or all); see "
        "`--scenario all --help` and docs/fairness.md",
    )
    a = p.parse_args(argv)
    if a.jobs < 1 or a.concurrency < 1 or not 0 <= a.long_fraction <= 1:
        p.error("--jobs and --concurrency must be at least 1, --long-fraction in [0, 1]")
    return Options(
        url=a.url.rstrip("/"),
        keys=split_keys(a.key or ["default_api_key"]),
        jobs=a.jobs,
        seed=a.seed,
        short_s=a.short_s,
        long_s=a.long_s,
        long_fraction=a.long_fraction,
        concurrency=a.concurrency,
        timeout=a.timeout,
        poll_s=a.poll_s,
        json=a.json,
    )


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


# --- HTTP -------------------------------------------------------------------------------------


def retry_after_s(reply: httpx.Response) -> float:
    """The pause a 429 or 503 asks for (Retry-After in seconds), 1 s when it names none."""
    try:
        pause = float(reply.headers.get("Retry-After", "1"))
    except ValueError:
        pause = 1.0  # an HTTP date: not sent by fairgpu
    return min(max(pause, 0.1), MAX_PAUSE_S) if math.isfinite(pause) else 1.0


async def send(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    key: str,
    *,
    body: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> httpx.Response:
    """One request with the key; a 429/503 is sent again after its Retry-After, a network
    error after a growing pause, up to MAX_TRIES tries."""
    headers = {"X-API-Key": key}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    for attempt in range(1, MAX_TRIES + 1):
        try:
            reply = await client.request(method, path, headers=headers, json=body)
        except httpx.TransportError:
            if attempt == MAX_TRIES:
                raise
            await asyncio.sleep(min(0.2 * attempt, 5.0))  # the network, or the API restarting
            continue
        if reply.status_code not in RETRYABLE or attempt == MAX_TRIES:
            return reply
        await asyncio.sleep(retry_after_s(reply))  # as the server asked
    raise AssertionError("unreachable")


def detail_of(reply: httpx.Response) -> str:
    """An error answer's detail, or its status and text."""
    try:
        detail = reply.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return f"HTTP {reply.status_code}: {detail if detail is not None else reply.text[:200]}"


async def submit(
    client: httpx.AsyncClient, spec: JobSpec, run_id: str, gate: asyncio.Semaphore
) -> Outcome:
    """POST one job; its Outcome holds the task id, or the error that refused it."""
    outcome = Outcome(spec.index, spec.key, spec.kind, spec.duration_s)
    body = {"kind": spec.kind, "duration_s": spec.duration_s}
    async with gate:
        try:
            reply = await send(
                client,
                "POST",
                "/enqueue-task",
                spec.key,
                body=body,
                idempotency_key=f"load-{run_id}-{spec.index}",
            )
        except httpx.HTTPError as exc:
            outcome.error = f"submit failed: {exc!r}"
            return outcome
    if reply.status_code == 200:
        outcome.task_id = str(reply.json()["task_id"])
        outcome.status = "PENDING"
    else:
        outcome.error = detail_of(reply)
    return outcome


def absorb(outcome: Outcome, state: dict[str, Any]) -> None:
    """Copy a TaskStatus answer into the outcome."""
    outcome.status = str(state["status"])
    outcome.attempts = int(state.get("attempts") or 0)
    outcome.error = state.get("error")
    result = state.get("result") or {}
    outcome.worker = result.get("worker")
    outcome.gpu_id = result.get("gpu_id")
    outcome.enqueued_at = result.get("enqueued_at")
    outcome.started_at = result.get("started_at")
    outcome.finished_at = result.get("finished_at")


async def refresh(client: httpx.AsyncClient, outcome: Outcome, gate: asyncio.Semaphore) -> None:
    """GET the job's status into its outcome; a 404 ends it as LOST."""
    async with gate:
        try:
            reply = await send(client, "GET", f"/task-status/{outcome.task_id}", outcome.key)
        except httpx.HTTPError as exc:
            outcome.error = f"status failed: {exc!r}"  # kept only if the job never ends
            return
    if reply.status_code == 200:
        absorb(outcome, reply.json())
    elif reply.status_code == 404:
        outcome.status, outcome.error = "LOST", detail_of(reply)


def open_jobs(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """The submitted jobs not yet seen ended."""
    return [o for o in outcomes if o.task_id and o.status not in TERMINAL | {"LOST"}]


async def wait_all(
    client: httpx.AsyncClient,
    outcomes: Sequence[Outcome],
    gate: asyncio.Semaphore,
    timeout_s: float,
    poll_s: float,
) -> None:
    """Poll the open jobs every poll_s until all have ended or timeout_s has passed; a job
    still open then keeps its last status with a timeout error."""
    deadline = time.monotonic() + timeout_s
    while (waiting := open_jobs(outcomes)) and time.monotonic() < deadline:
        await asyncio.gather(*(refresh(client, o, gate) for o in waiting))
        if open_jobs(outcomes):
            await asyncio.sleep(poll_s)  # a modest interval between status rounds
    for outcome in open_jobs(outcomes):
        outcome.error = f"still {outcome.status} after the {timeout_s:g} s timeout"


async def account_of(client: httpx.AsyncClient, key: str) -> str:
    """The account (user_id) behind a key, read from its newest billing record; the key itself
    when it has none."""
    try:
        reply = await send(client, "GET", "/billing-records?limit=1", key)
    except httpx.HTTPError:
        return key
    records = reply.json() if reply.status_code == 200 else []
    return str(records[0]["user_id"]) if records else key


async def run(opts: Options) -> list[Outcome]:
    """Submit the plan, wait for every job, and label each with its account."""
    plan = plan_jobs(opts)
    run_id = uuid.uuid4().hex[:12]
    gate = asyncio.Semaphore(opts.concurrency)
    limits = httpx.Limits(max_connections=opts.concurrency)
    async with httpx.AsyncClient(base_url=opts.url, timeout=30, limits=limits) as client:
        began = time.monotonic()
        outcomes = list(await asyncio.gather(*(submit(client, s, run_id, gate) for s in plan)))
        accepted = sum(o.task_id is not None for o in outcomes)
        note(f"{accepted}/{len(plan)} jobs accepted in {time.monotonic() - began:.1f} s; waiting")
        timeout_s = opts.timeout if opts.timeout is not None else default_timeout(plan)
        await wait_all(client, outcomes, gate, timeout_s, opts.poll_s)
        accounts = {key: await account_of(client, key) for key in opts.keys}
    for outcome in outcomes:
        outcome.account = accounts[outcome.key]
    note(f"done in {time.monotonic() - began:.1f} s")
    return outcomes


def note(text: str) -> None:
    """Progress, on stderr so that stdout holds only the report."""
    print(text, file=sys.stderr, flush=True)


# --- the report -------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def span(done: Sequence[Outcome]) -> tuple[float, float]:
    """First enqueued_at and last finished_at of the successful jobs."""
    first = min(o.enqueued_at for o in done if o.enqueued_at is not None)
    last = max(o.finished_at for o in done if o.finished_at is not None)
    return first, last


def throughput_line(done: Sequence[Outcome]) -> str:
    """`N jobs in T s, throughput X jobs/min`."""
    if not done:
        return "0 jobs in 0.0 s, throughput 0.00 jobs/min"
    first, last = span(done)
    total = last - first
    rate = len(done) / total * 60 if total > 0 else math.inf
    return f"{len(done)} jobs in {total:.1f} s, throughput {rate:.2f} jobs/min"


def group(done: Iterable[Outcome], by: Callable[[Outcome], str]) -> dict[str, list[Outcome]]:
    """The outcomes grouped by a label, labels sorted."""
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in done:
        groups[by(outcome)].append(outcome)
    return dict(sorted(groups.items()))


def wait_cells(jobs: Sequence[Outcome]) -> list[str]:
    """Jobs, wait p50 and wait p95 of a group."""
    waits = [o.wait_s for o in jobs]
    return [str(len(jobs)), f"{percentile(waits, 50):.1f}", f"{percentile(waits, 95):.1f}"]


def queue_table(done: Sequence[Outcome]) -> str:
    """Wait p50/p95 per queue, short before long."""
    groups = group(done, lambda o: o.kind)
    rows = [[kind, *wait_cells(groups[kind])] for kind in ("short", "long") if kind in groups]
    return format_table(["queue", "jobs", "wait p50 (s)", "wait p95 (s)"], rows)


def worker_table(done: Sequence[Outcome]) -> str:
    """Jobs, busy seconds and busy % of the run per worker."""
    first, last = span(done) if done else (0.0, 0.0)
    total = last - first
    rows = []
    for worker, jobs in group(done, lambda o: o.worker or "?").items():
        busy = sum(o.busy_s for o in jobs)
        share = f"{busy / total * 100:.1f}" if total > 0 else "-"
        rows.append([worker, str(len(jobs)), f"{busy:.1f}", share])
    return format_table(["worker", "jobs", "busy (s)", "busy %"], rows)


def account_table(done: Sequence[Outcome]) -> str:
    """Jobs, wait p50/p95 and GPU-seconds per account."""
    rows = []
    for account, jobs in group(done, lambda o: o.account or o.key).items():
        keys = ",".join(dict.fromkeys(o.key for o in jobs))
        gpu_s = sum(o.busy_s for o in jobs)
        rows.append([account, keys, *wait_cells(jobs), f"{gpu_s:.1f}"])
    headers = ["account", "keys", "jobs", "wait p50 (s)", "wait p95 (s)", "GPU-s"]
    return format_table(headers, rows, left=2)


def failure_lines(failed: Sequence[Outcome]) -> list[str]:
    """One line per job that did not succeed: its task id, key, queue, status and error."""
    lines = [f"{len(failed)} job(s) did not succeed:"]
    for o in failed:
        lines.append(
            f"  #{o.index} {o.task_id or '-'} {o.key} {o.kind} {o.status}: {o.error or '-'}"
        )
    return lines


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """Plain text columns: the first `left` aligned left, the rest right, three spaces apart."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "   ".join(parts).rstrip()

    return "\n".join(line(r) for r in [headers, *rows])


def render(outcomes: Sequence[Outcome]) -> str:
    """The whole report: throughput, the three tables, and the jobs that failed."""
    done = [o for o in outcomes if o.succeeded]
    failed = [o for o in outcomes if not o.succeeded]
    parts = [throughput_line(done), queue_table(done), worker_table(done), account_table(done)]
    if failed:
        parts.append("\n".join(failure_lines(failed)))
    return "\n\n".join(parts)


def as_json(outcomes: Sequence[Outcome]) -> str:
    """The per-job results, with wait and busy seconds, as a JSON list."""
    rows = [
        {**asdict(o), "wait_s": o.wait_s, "busy_s": o.busy_s} if o.succeeded else asdict(o)
        for o in outcomes
    ]
    return json.dumps(rows, indent=2)


def wants_scenarios(argv: Sequence[str]) -> bool:
    """Whether the command line asks for the fairness scenarios (--scenario)."""
    return any(a == "--scenario" or a.startswith("--scenario=") for a in argv)


def run_scenarios(argv: Sequence[str]) -> int:
    """Hand the whole command line to the fairness scenarios (scripts/fairness/)."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)  # scripts.fairness, when this file runs as a script
    from scripts.fairness.cli import main as scenarios_main

    return scenarios_main(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the load test; 0 when every job succeeded, else 1. With --scenario, the fairness
    scenarios run instead (scripts/fairness/cli.py says what they return)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if wants_scenarios(args):
        return run_scenarios(args)
    opts = parse_args(args)
    outcomes = asyncio.run(run(opts))
    print(as_json(outcomes) if opts.json else render(outcomes))
    return 0 if all(o.succeeded for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
