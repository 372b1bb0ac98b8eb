"""The `fairgpu` client commands: submit, status, watch, cancel, tasks, billing, account, queues
and `admin promote/release/drop`, over HTTP with app.client. Tables for people, `--json` for
scripts; every failure is one line on stderr and a non-zero exit code."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text
from typer._click import Context as ClickContext  # typer ships its own copy of click
from typer._click.exceptions import UsageError
from typer.core import TyperCommand

from app.client import DEFAULT_URL, Client, FairgpuError, one_line
from app.models import BillingRecord, QueuesView, Status, TaskPage, TaskStatus
from app.settings import Kind

USAGE = 2  # exit code of a command given wrong arguments, as click uses
FAILED = 1  # exit code when the server refuses or cannot be reached
JOB_DID_NOT_SUCCEED = 3  # exit code of a watch whose job ended FAILURE or REVOKED
INTERRUPTED = 130
STYLE = {
    Status.PENDING: "yellow",
    Status.STARTED: "cyan",
    Status.SUCCESS: "green",
    Status.FAILURE: "red",
    Status.REVOKED: "magenta",
}


class OneLineUsage(TyperCommand):
    """A command whose usage errors are one line on stderr and exit code 2, like its other
    errors, rather than a framed panel."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: ClickContext | None = None,
        **extra: Any,
    ) -> ClickContext:
        """Parse the arguments; a usage error is reported on one line."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except UsageError as exc:
            typer.echo(f"fairgpu {info_name}: {one_line(exc.format_message())}", err=True)
            raise typer.Exit(USAGE) from None


UrlOption = Annotated[
    str, typer.Option("--url", envvar="FAIRGPU_URL", help="the API's base URL", show_envvar=True)
]
KeyOption = Annotated[
    str | None,
    typer.Option(
        "--key", envvar="FAIRGPU_API_KEY", help="your API key", show_default=False, show_envvar=True
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON for scripts, not tables")]
TaskId = Annotated[str, typer.Argument(help="the task's id, as submit printed it")]
admin = typer.Typer(help="Admin actions on queues and jobs (admin accounts only).")


def register(cli: typer.Typer) -> None:
    """Add the client commands, and the `admin` group, to the `fairgpu` command."""
    commands: list[Callable[..., None]] = [submit, status, watch, cancel, tasks, billing]
    for command in [*commands, account, queues]:
        cli.command(cls=OneLineUsage)(command)
    admin_commands: list[Callable[..., None]] = [promote, release, drop]
    for command in admin_commands:
        admin.command(cls=OneLineUsage)(command)
    cli.add_typer(admin, name="admin")


# -- commands -------------------------------------------------------------------------------------
def submit(
    kind: Annotated[Kind, typer.Argument(help="short (up to 60 s) or long (up to 3000 s)")],
    duration: Annotated[float, typer.Argument(help="GPU-seconds the job runs")],
    watch_it: Annotated[
        bool, typer.Option("--watch", help="follow the job with a live status line until it ends")
    ] = False,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="submit at most once per key: a retry returns the same task"),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Submit a job to the short or long queue, and with --watch follow it to its end."""
    with session(url, key) as client:
        reply = client.submit(kind, duration, idempotency_key=idempotency_key)
        if not watch_it:
            if as_json:
                typer.echo(reply.model_dump_json())
            else:
                out().print(_about("Submitted ", reply.task_id, f" ({kind}, {span(duration)})."))
                out().print(f"Follow it: fairgpu watch {reply.task_id}", style="dim")
            return
        if not as_json:
            out().print(_about("Submitted ", reply.task_id, f" ({kind}, {span(duration)})."))
        try:
            _watch_to_end(client, reply.task_id, as_json)
        except FairgpuError as exc:
            # Say which task, or a script that failed to watch it would not know it exists.
            raise FairgpuError(f"{exc} (watching {reply.task_id}, which was submitted)") from None


def status(
    task_id: TaskId,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a job's status: its place in line and start estimate, or its result and cost."""
    with session(url, key) as client:
        state = client.status(task_id)
        if as_json:
            typer.echo(state.model_dump_json())
            return
        out().print(task_table(state, _bill(client, state)))


def watch(
    task_id: TaskId,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Follow a job with a live status line (--json: one status per line) until it ends.

    Exits 0 when the job succeeded and 3 when it failed or was revoked."""
    with session(url, key) as client:
        _watch_to_end(client, task_id, as_json)


def cancel(
    task_id: TaskId,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Cancel a job: a queued one is revoked unbilled; a running one is asked to stop."""
    with session(url, key) as client:
        task, stopping = client.cancel(task_id)
        if as_json:
            typer.echo(task.model_dump_json())
        elif stopping:
            stop = ": it is running, and ends REVOKED, billed for the seconds it ran."
            out().print(_about("Asked ", task_id, " to stop" + stop))
        else:
            out().print(_about("Revoked ", task_id, ": it was still queued and is not billed."))


def tasks(
    status: Annotated[
        Status | None, typer.Option(case_sensitive=False, help="only jobs with this status")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100, help="jobs per page")] = 20,
    cursor: Annotated[
        str | None, typer.Option(help="the page after this one (next_cursor)")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="every page, following the cursors")] = False,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """List your jobs, newest first."""
    with session(url, key) as client:
        if every:
            found, next_cursor = list(client.all_tasks(status, limit)), None
        else:
            page = client.tasks(status, limit, cursor)
            found, next_cursor = page.tasks, page.next_cursor
        if as_json:
            typer.echo(_json_page(found, next_cursor))
            return
        if found:
            out().print(tasks_table(found))
        elif next_cursor is None:
            out().print("No tasks.")
        else:
            # A filtered page can be empty with more pages after it.
            out().print("No tasks on this page.")
        if next_cursor is not None:
            out().print(
                f"More: fairgpu tasks --cursor {next_cursor} (or --all)",
                style="dim",
                soft_wrap=True,
            )


def billing(
    limit: Annotated[int, typer.Option(min=1, max=1000, help="most records to show")] = 100,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """List what your account has been charged, newest first."""
    with session(url, key) as client:
        bills = client.billing(limit)
        if as_json:
            typer.echo("[" + ",".join(b.model_dump_json() for b in bills) + "]")
        elif not bills:
            out().print("No charges.")
        else:
            out().print(billing_table(bills))


def account(
    url: UrlOption = DEFAULT_URL, key: KeyOption = None, as_json: JsonOption = False
) -> None:
    """Show the account your key belongs to."""
    with session(url, key) as client:
        who = client.account()
        if as_json:
            typer.echo(who.model_dump_json())
            return
        table = _fields_table()
        table.add_row("account", who.user_id)
        table.add_row("description", who.description)
        table.add_row("share", f"{who.share:g}")
        table.add_row("admin", "yes" if who.admin else "no")
        out().print(table)


def queues(
    url: UrlOption = DEFAULT_URL, key: KeyOption = None, as_json: JsonOption = False
) -> None:
    """Show each queue: jobs queued and running, workers, fairness and top accounts (admins)."""
    with session(url, key) as client:
        view = client.queues()
        if as_json:
            typer.echo(view.model_dump_json())
        else:
            out().print(queues_table(view))


def promote(
    task_id: TaskId,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Move a queued job to the very front of its queue."""
    with session(url, key) as client:
        _print_state(client.promote(task_id), as_json, "Promoted")


def release(
    task_id: TaskId,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Give a running job's lease back: the job returns to the front of its queue."""
    with session(url, key) as client:
        _print_state(client.release(task_id), as_json, "Released")


def drop(
    queue: Annotated[str, typer.Argument(help="short or long")],
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Revoke every job queued in a queue."""
    with session(url, key) as client:
        if not yes and not typer.confirm(f"Revoke every job queued in {queue}?", err=True):
            fail(f"nothing dropped from {queue}", FAILED)
        result = client.drop(queue)
        if as_json:
            typer.echo(result.model_dump_json())
        else:
            out().print(f"Dropped {result.dropped} job(s) from {result.queue}.")


# -- plumbing -------------------------------------------------------------------------------------
def out() -> Console:
    """The console for people, on whatever stdout is now (a test runner swaps it). Markup is
    off: text from the server (an error, a worker's name) is printed as it is, never parsed."""
    return Console(highlight=False, markup=False)


def _about(before: str, task_id: str, after: str) -> Text:
    """A sentence about one task, its id in bold."""
    return Text.assemble(before, (task_id, "bold"), after)


def fail(message: str, code: int) -> NoReturn:
    """Report one line on stderr and exit with `code`."""
    typer.echo(f"fairgpu: {one_line(message)}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def session(url: str, key: str | None) -> Iterator[Client]:
    """A client for one command; its errors become one line on stderr and an exit code."""
    if not key:
        fail("no API key: pass --key or set FAIRGPU_API_KEY", USAGE)
    try:
        client = Client(url, key)
    except ValueError as exc:
        fail(str(exc), USAGE)
    with client:
        try:
            yield client
        except FairgpuError as exc:
            fail(str(exc), FAILED)


def _watch_to_end(client: Client, task_id: str, as_json: bool) -> None:
    try:
        if as_json:
            last = _follow_json(client, task_id)
        elif out().is_terminal:
            last = _follow_live(client, task_id)
        else:
            last = _follow_lines(client, task_id)
    except KeyboardInterrupt:
        fail(f"stopped watching {task_id}; the job goes on (fairgpu cancel {task_id})", INTERRUPTED)
    if not as_json:
        out().print(task_table(last, _bill(client, last)))
    if last.status is not Status.SUCCESS:
        raise typer.Exit(JOB_DID_NOT_SUCCEED)


def _follow_json(client: Client, task_id: str) -> TaskStatus:
    last = None
    for state in client.watch(task_id):
        typer.echo(state.model_dump_json())
        last = state
    return _ended(last)


def _follow_live(client: Client, task_id: str) -> TaskStatus:
    """A spinner and one status line, redrawn as events come and as the clock moves."""
    spinner = Spinner("dots")
    last: TaskStatus | None = None

    def render() -> RenderableType:
        spinner.update(text=Text("connecting...") if last is None else live_line(last, time.time()))
        return spinner

    with Live(console=out(), get_renderable=render, transient=True, refresh_per_second=4):
        for state in client.watch(task_id):
            last = state
    return _ended(last)


def _follow_lines(client: Client, task_id: str) -> TaskStatus:
    """One line per change, for output that is not a terminal (a log, a pipe)."""
    console, shown, last = out(), "", None
    for state in client.watch(task_id):
        now = time.time()
        line = live_line(state, now, ticking=False)
        if line.plain != shown:
            when = clock(_moment(state, now, first=last is None), now)
            console.print(Text(when + " ").append_text(line), soft_wrap=True)
            shown = line.plain
        last = state
    return _ended(last)


def _moment(state: TaskStatus, now: float, *, first: bool) -> float:
    """When the change an event reports happened: a replayed event is older than now."""
    result = state.result
    if state.status.terminal and result is not None and result.finished_at is not None:
        return result.finished_at
    if state.status is Status.STARTED and result is not None and result.started_at is not None:
        return now if state.cancel_requested else result.started_at
    if first and state.position is None and state.enqueued_at is not None:
        return state.enqueued_at  # a replay of its creation: a live one would have a position
    return now


def _ended(last: TaskStatus | None) -> TaskStatus:
    if last is None:
        # watch() ends only after a terminal status, so this is a server breaking the protocol.
        raise FairgpuError("the event stream ended without a status")
    return last


def _bill(client: Client, state: TaskStatus) -> BillingRecord | None:
    """The job's charge once it has ended (a REVOKED one may have none)."""
    return client.cost_of(state.task_id) if state.status.terminal else None


def _print_state(state: TaskStatus, as_json: bool, done: str) -> None:
    if as_json:
        typer.echo(state.model_dump_json())
    else:
        out().print(_about(f"{done} ", state.task_id, "."))
        out().print(task_table(state, None))


def _json_page(found: list[TaskStatus], next_cursor: str | None) -> str:
    """The shape of GET /tasks, also for --all (every page in one, with no next cursor)."""
    return TaskPage(tasks=found, next_cursor=next_cursor).model_dump_json()


# -- rendering ------------------------------------------------------------------------------------
def span(seconds: float) -> str:
    """A duration for people: "0.3 s", "4 s", "42 s", "3 min 5 s", "2 h 10 min"."""
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def clock(at: float, now: float | None = None) -> str:
    """A Unix time as local clock time, with the date when it is not today."""
    today = time.localtime(time.time() if now is None else now)
    moment = time.localtime(at)
    if moment[:3] == today[:3]:
        return time.strftime("%H:%M:%S", moment)
    return time.strftime("%Y-%m-%d %H:%M:%S", moment)


def eta(estimated_start_at: float, now: float) -> str:
    """When a queued job should start: "starts in ~42 s (at 14:03:12)"."""
    ahead = estimated_start_at - now
    if ahead < 1:
        return "starts any moment"
    return f"starts in ~{span(round(ahead))} (at {clock(estimated_start_at, now)})"


def place(position: int) -> str:
    """A 0-based queue position for people."""
    if position == 0:
        return "next in line"
    return f"{position} job{'s' if position > 1 else ''} ahead"


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


def _ran(state: TaskStatus, now: float) -> float | None:
    result = state.result
    if result is None or result.started_at is None:
        return None
    # max: this machine's clock may be a little behind the server's
    return max(0.0, (result.finished_at or now) - result.started_at)


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
    ran = _ran(state, now)
    if ran is not None and (ticking or state.status.terminal):
        line.append(f"  {'ran' if state.status.terminal else 'running'} {span(ran)}")
    if state.cancel_requested:
        line.append("  stopping (cancel requested)", style="magenta")
    if state.error:
        line.append(f"  {one_line(state.error)}", style="red")
    return line


def _fields_table() -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    return table


def task_table(state: TaskStatus, bill: BillingRecord | None) -> Table:
    """One job, field by field, with its cost when it has a bill."""
    now = time.time()
    table = _fields_table()
    table.add_row("task", state.task_id)
    table.add_row("status", Text(state.status.value, style=f"bold {STYLE[state.status]}"))
    table.add_row("kind", state.kind)
    for name, value in _job_rows(state, now):
        table.add_row(name, value)
    if bill is not None:
        table.add_row("cost", f"{bill.cost:.2f} ({bill.gpu_seconds:g} GPU-s, {bill.description})")
    return table


def _job_rows(state: TaskStatus, now: float) -> Iterator[tuple[str, str]]:
    result = state.result
    submitted = state.enqueued_at or (result.enqueued_at if result else None)
    if submitted is not None:
        yield "submitted", clock(submitted, now)
    if state.status is Status.PENDING and state.position is not None:
        yield "position", place(state.position)
        start = state.estimated_start_at
        yield "start", "unknown (no worker serves its queue)" if start is None else eta(start, now)
    yield "attempts", str(state.attempts)
    if result is not None:
        yield from _result_rows(state, now)
    if state.cancel_requested:
        yield "cancel", "requested; the job is stopping"
    if state.error:
        yield "error", one_line(state.error)


def _result_rows(state: TaskStatus, now: float) -> Iterator[tuple[str, str]]:
    result = state.result
    assert result is not None
    if result.worker:
        yield "worker", _worker(state).removeprefix("on ")
    if result.started_at is not None:
        yield "started", clock(result.started_at, now)
    if result.finished_at is not None:
        yield "finished", clock(result.finished_at, now)
    ran = _ran(state, now)
    if ran is not None:
        yield "ran", f"{span(ran)} of {span(result.duration_s)} asked"
    if result.tflops is not None:
        yield "TFLOP/s", f"{result.tflops:.1f}"


def _where(state: TaskStatus, now: float) -> str:
    if state.status is Status.PENDING:
        return waiting(state, now)
    ran = _ran(state, now)
    where = _worker(state)
    if ran is not None:
        where += f", {'ran' if state.status.terminal else 'running'} {span(ran)}"
    if state.error:
        where += f"  {one_line(state.error)}"
    return where.strip(", ")


def tasks_table(found: list[TaskStatus]) -> Table:
    """Jobs, one a row."""
    now = time.time()
    table = Table()
    table.add_column("task", no_wrap=True, min_width=36)
    for name in ("status", "kind", "submitted", "tries"):
        table.add_column(name, no_wrap=True)
    table.add_column("where / when", overflow="fold")
    for state in found:
        submitted = state.enqueued_at or (state.result.enqueued_at if state.result else None)
        table.add_row(
            state.task_id,
            Text(state.status.value, style=STYLE[state.status]),
            state.kind,
            "" if submitted is None else clock(submitted, now),
            str(state.attempts),
            _where(state, now),
        )
    return table


def billing_table(bills: list[BillingRecord]) -> Table:
    """Charges, one a row, and their total."""
    now = time.time()
    table = Table(show_footer=True)
    table.add_column("billed", no_wrap=True, footer="total")
    table.add_column("task", no_wrap=True, min_width=36)
    table.add_column("kind")
    table.add_column("GPU-s", justify="right")
    table.add_column("cost", justify="right", footer=f"{sum(b.cost for b in bills):.2f}")
    table.add_column("description", overflow="fold")
    for bill in bills:
        table.add_row(
            clock(bill.billed_at, now),
            bill.task_id,
            bill.kind,
            f"{bill.gpu_seconds:g}",
            f"{bill.cost:.2f}",
            bill.description,
        )
    return table


def queues_table(view: QueuesView) -> Table:
    """Each queue, one a row."""
    table = Table()
    for name in ("queue", "queued", "running", "workers", "fairness lag"):
        table.add_column(name, no_wrap=True, justify="left" if name == "queue" else "right")
    table.add_column("top accounts (queued)", overflow="fold")
    table.add_column("counters", overflow="fold")
    for queue in view.queues:
        top = ", ".join(f"{a.user_id[:8]}…: {a.queued}" for a in queue.top_accounts)
        stats = ", ".join(f"{name} {count}" for name, count in sorted(queue.stats.items()))
        table.add_row(
            queue.name,
            str(queue.queued),
            str(queue.in_flight),
            str(queue.workers),
            f"{queue.fairness_lag_s:g} s",
            top or "-",
            stats or "-",
        )
    return table
