"""The load test's report, from the timestamps the jobs returned only: the throughput line,
wait p50/p95 per queue, busy time per worker, a table per account, and the jobs that failed."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict

from scripts.benchkit.load.jobs import Outcome
from scripts.benchkit.stats import percentile


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
