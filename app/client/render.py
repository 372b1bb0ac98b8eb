"""What the client commands show people: the live status line of `watch`, and the tables of
jobs, charges and queues (the words they are made of: app/client/words.py). Pure functions of
the data and the time."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from app.client.cards import devices_words, gpus_range, reserved_words
from app.client.fit import GAP, Cell, Column, fitted_table
from app.client.runs import over, preempted_words, ran_s, ran_words
from app.client.transport import one_line
from app.client.words import (
    clean,
    clock,
    environment_words,
    eta,
    exit_code_words,
    moment,
    money,
    place,
    size,
    span,
)
from app.models import (
    Artifact,
    JobResult,
    JobTypeView,
    LogLine,
    Progress,
    Status,
    TaskStatus,
    WaitingFor,
)
from app.usage_models import BillingRecord

#: The most characters of a job's output that `status` shows; --json shows all of it.
OUTPUT_SHOWN = 2000
#: The most artifacts that `status` lists by name; `fairgpu artifacts` lists them all.
ARTIFACTS_SHOWN = 10
#: How each stream of a job's log is marked in front of its lines; stderr's stand out in red.
LOG_MARK = {"stdout": ("out", "dim"), "stderr": ("err", "bold red"), "log": ("log", "dim")}
SHA256_SHORT = 12  # hex digits of a digest shown when the whole one does not fit
STYLE = {
    Status.PENDING: "yellow",
    Status.STARTED: "cyan",
    Status.SUCCESS: "green",
    Status.FAILURE: "red",
    Status.REVOKED: "magenta",
}


def out() -> Console:
    """The console for people, on whatever stdout is now (a test runner swaps it). Markup is
    off: text from the server (an error, a worker's name) is printed as it is, never parsed."""
    return Console(highlight=False, markup=False)


def about(before: str, task_id: str, after: str) -> Text:
    """A sentence about one task, its id in bold."""
    return Text.assemble(before, (task_id, "bold"), after)


#: Why a queued job waits, in words (TaskStatus.waiting_for).
WAITING_FOR: dict[WaitingFor, str] = {
    "gpu_class": "a card of its class: no worker of the fleet has one",
    "account_limit": "its account's limit (max_running or max_held_gpu_seconds)",
    "gpu": "its GPUs: its turn has come",
    "turn": "its turn: other jobs go first",
}


def waiting(state: TaskStatus, now: float) -> str:
    """A queued job's place and start estimate. A replayed event of a job that has left the
    queue since carries neither: then it is just "queued"."""
    if state.position is None:
        return "queued"
    if state.estimated_start_at is None:
        return f"{place(state.position)}, start unknown (no worker serves its queue)"
    return f"{place(state.position)}, {eta(state.estimated_start_at, now)}"


def _worker(state: TaskStatus) -> str:
    result = state.result
    if result is None or result.worker is None:
        return ""
    gpu = "" if result.gpu_id is None else f", GPU {result.gpu_id}"
    return f"on {result.worker}{gpu}"


def live_line(state: TaskStatus, now: float, *, ticking: bool = True) -> Text:
    """The one line of `watch`: status, kind, then its place and ETA, or where it runs.

    `ticking` adds what changes with the clock (how long it has run), for a live display."""
    line = Text()
    line.append(state.status.value, style=f"bold {STYLE[state.status]}")
    line.append(f"  {state.kind}  ")
    if state.status is Status.PENDING:
        line.append(waiting(state, now))
    else:
        line.append(_worker(state))
    ran = ran_words(state, now)
    if ran and (ticking or state.status is not Status.STARTED):
        line.append(f"  {ran}")
    if state.cancel_requested and state.status is Status.STARTED:
        line.append("  stopping (cancel requested)", style="magenta")
    if state.error:
        line.append(f"  {one_line(state.error)}", style="red")
    return line


def fields_table() -> Table:
    """An empty two-column table of names (bold) and values, with no frame."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    return table


def task_table(state: TaskStatus, bill: BillingRecord | None) -> Table:
    """One job, field by field, with its cost when it has a bill."""
    now = time.time()
    table = fields_table()
    table.add_row("task", state.task_id)
    table.add_row("status", Text(state.status.value, style=f"bold {STYLE[state.status]}"))
    table.add_row("kind", state.kind)
    table.add_row("type", state.type)
    if state.gpus > 1:
        table.add_row("gpus", str(state.gpus))
    for name, value in _job_rows(state, now):
        table.add_row(name, value)
    if bill is not None:
        table.add_row(
            "cost", f"{money(bill.cost_micros)} ({bill.gpu_seconds:g} GPU-s, {bill.description})"
        )
    return table


def _job_rows(state: TaskStatus, now: float) -> Iterator[tuple[str, str]]:
    result = state.result
    submitted = state.enqueued_at or (result.enqueued_at if result else None)
    if submitted is not None:
        yield "submitted", clock(submitted, now)
    if state.status is Status.PENDING:
        yield from _waiting_rows(state, now)
    yield "attempts", str(state.attempts)
    if state.preemptions:
        yield "preempted", preempted_words(state)
    if state.status is Status.PENDING and state.runs:
        yield "ran", ran_words(state, now).removeprefix("ran ")
    if state.status is Status.STARTED and state.progress is not None:
        yield "progress", progress_text(state.progress)
    if result is not None:
        yield from _result_rows(state, now)
    if state.cancel_requested:
        stopping = "the job is stopping" if state.status is Status.STARTED else "it stopped"
        yield "cancel", f"requested; {stopping}"
    if state.error_kind:
        yield "ended by", state.error_kind
    if state.error:
        yield "error", one_line(state.error)


def _waiting_rows(state: TaskStatus, now: float) -> Iterator[tuple[str, str]]:
    """A queued job's place, why it waits and when it should start."""
    if state.position is None:
        return
    yield "position", place(state.position)
    if state.waiting_for is not None:
        yield "waiting for", WAITING_FOR[state.waiting_for]
    if state.reservation is not None:
        yield "reserved", reserved_words(state.reservation, now)
    start = state.estimated_start_at
    yield "start", "unknown (no worker serves its queue)" if start is None else eta(start, now)


def _result_rows(state: TaskStatus, now: float) -> Iterator[tuple[str, str]]:
    result = state.result
    assert result is not None
    if result.worker:
        yield "worker", _worker(state).removeprefix("on ")
    if result.devices and len(result.devices) > 1:
        yield "cards", devices_words(result.devices, result.host)
    if result.started_at is not None:
        last = " (its last run)" if state.runs > 1 else ""
        yield "started", clock(result.started_at, now) + last
    if result.finished_at is not None:
        yield "finished", clock(result.finished_at, now)
    ran = ran_s(state, now)
    if ran is not None:
        yield "ran", f"{span(ran)} of {span(result.duration_s)} asked{over(state)}"
    if result.tflops is not None:
        yield "TFLOP/s", f"{result.tflops:.1f}"
    yield from _outcome_rows(result)


def _outcome_rows(result: JobResult) -> Iterator[tuple[str, str]]:
    """What the run used at most, and what the job returned."""
    for name, used in (
        ("peak GPU memory", result.peak_gpu_memory_bytes),
        ("peak RSS", result.peak_rss_bytes),
    ):
        if used is not None:
            yield name, size(used)
    if result.exit_code is not None:
        yield "exit code", exit_code_words(result.exit_code)
    if result.environment is not None:
        yield "environment", environment_words(result.environment)
    if result.output is not None:
        yield "output", shown_output(result.output)
    if result.artifacts:
        yield "artifacts", artifact_list(result.artifacts)


def artifact_list(found: list[Artifact]) -> str:
    """A job's artifacts for its status: names and sizes, the first ARTIFACTS_SHOWN of them."""
    lines = [f"{clean(a.name)} ({size(a.size)})" for a in found[:ARTIFACTS_SHOWN]]
    if len(found) > ARTIFACTS_SHOWN:
        lines.append(f"… and {len(found) - ARTIFACTS_SHOWN} more")
    return "\n".join(lines)


def progress_text(progress: Progress) -> str:
    """A job's progress in words: "42%  loading data", or only either."""
    parts = []
    if progress.fraction is not None:
        parts.append(f"{progress.fraction:.0%}")
    if progress.message:
        parts.append(clean(one_line(progress.message)))
    return "  ".join(parts) or "running"


def progress_bar(progress: Progress, width: int = 30) -> RenderableType:
    """A bar and the progress in words; a bar that pulses while the job gives no fraction."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=width)
    grid.add_column(overflow="ellipsis", no_wrap=True)
    fraction = progress.fraction
    bar = ProgressBar(total=1.0, completed=fraction or 0.0, width=width, pulse=fraction is None)
    grid.add_row(bar, Text(progress_text(progress)))
    return grid


def log_text(line: LogLine, now: float | None = None) -> Text:
    """One log line for people: its clock time, its stream (err in red) and its text."""
    mark, style = LOG_MARK.get(line.stream, ("log", "dim"))
    text = Text(clock(line.at, now) + " ", style="dim")
    text.append(mark, style=style)
    text.append(" " + clean(line.text))
    return text


def artifacts_table(found: list[Artifact], width: int) -> Table:
    """A job's artifacts, one a row: name, size and SHA-256, cut to its first digits when the
    whole one does not fit in width columns (--json has it whole)."""
    names = max((cell_len(clean(a.name)) for a in found), default=4)
    sizes = max((len(size(a.size)) for a in found), default=4)
    whole = names + sizes + 64 + 2 * GAP <= width
    columns = [Column("name"), Column("size", justify="right"), Column("sha256")]
    rows = [
        [clean(a.name), size(a.size), a.sha256 if whole else a.sha256[:SHA256_SHORT] + "…"]
        for a in found
    ]
    return fitted_table(columns, rows, width)


def shown_output(output: object) -> str:
    """A job's output as compact JSON, cut at OUTPUT_SHOWN characters."""
    text = json.dumps(output, ensure_ascii=False, separators=(", ", ": "))
    if len(text) <= OUTPUT_SHOWN:
        return text
    return f"{text[:OUTPUT_SHOWN]}… ({len(text)} characters; --json shows all)"


def _where(state: TaskStatus, now: float) -> str:
    if state.status is Status.PENDING:
        return waiting(state, now)
    ran = ran_words(state, now)
    where = _worker(state).removeprefix("on ")  # the column says where
    if ran:
        where += f", {ran}"
    if state.error:
        where += f"  {one_line(state.error)}"
    return where.strip(", ")


def tasks_table(found: list[TaskStatus], width: int) -> Table:
    """Jobs, one a row, in width columns: the task ids whole (they are what the other commands
    take), where / when wrapped, or left out when even that does not fit."""
    now = time.time()
    columns = [
        Column("task"),
        Column("status"),
        Column("kind"),
        Column("submitted"),
        Column("tries", justify="right"),
        Column("where / when", optional=True, wrap=True),
    ]
    rows: list[list[Cell]] = []
    for state in found:
        submitted = state.enqueued_at or (state.result.enqueued_at if state.result else None)
        rows.append(
            [
                state.task_id,
                Text(state.status.value, style=STYLE[state.status]),
                state.kind,
                "" if submitted is None else moment(submitted, now),
                str(state.attempts),
                _where(state, now),
            ]
        )
    return fitted_table(columns, rows, width)


def types_table(found: list[JobTypeView], width: int) -> Table:
    """Job types, one a row, in width columns (the description is left out when it does not
    fit). "max s" is the longest a submit may ask for in the type's queue, then in the other
    queue where that differs: "60 (long 3000)", wall-clock whatever its gpus; "gpus", the cards a
    job of it takes ("1-64": a submit picks); "preemptible", whether a run of it may be asked
    to yield its GPU (docs/jobs.md)."""
    columns = [
        Column("name"),
        Column("queue"),
        Column("max s", justify="right"),
        Column("gpus", justify="right"),
        Column("preemptible"),
        Column("available", wrap=True),
        Column("description", optional=True, wrap=True),
    ]
    rows = [
        [
            t.name,
            t.queue,
            _longest(t),
            gpus_range(t),
            "yes" if t.preemptible else "no",
            _availability(t),
            one_line(t.description),
        ]
        for t in found
    ]
    return fitted_table(columns, rows, width)


def _longest(job_type: JobTypeView) -> str:
    own = job_type.max_duration_s
    others = [
        f"{queue} {limit:g}"
        for queue, limit in job_type.max_duration_s_by_queue.items()
        if queue != job_type.queue and limit != own
    ]
    return f"{own:g} ({', '.join(others)})" if others else f"{own:g}"


def _availability(job_type: JobTypeView) -> str:
    if job_type.available:
        return "yes"
    reason = job_type.unavailable_reason
    return f"no: {one_line(reason)}" if reason else "no"


def billing_table(bills: list[BillingRecord], width: int) -> Table:
    """Charges, one a row, and their total, in width columns (the description is left out when
    it does not fit)."""
    now = time.time()
    total = money(sum(b.cost_micros for b in bills))  # exact: whole micro-units
    columns = [
        Column("billed", footer="total"),
        Column("task"),
        Column("kind"),
        Column("GPU-s", justify="right"),
        Column("cost", justify="right", footer=total),
        Column("description", optional=True, wrap=True),
    ]
    rows = [
        [
            moment(bill.billed_at, now),
            bill.task_id,
            bill.kind,
            f"{bill.gpu_seconds:g}",
            money(bill.cost_micros),
            bill.description,
        ]
        for bill in bills
    ]
    return fitted_table(columns, rows, width)
