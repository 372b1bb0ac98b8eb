"""Following a job to its end, as `watch` and `submit --watch` do: a live status line on a
terminal, one line per change in a log or a pipe, or one JSON status per line for scripts."""

from __future__ import annotations

import time

import typer
from rich.console import RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from app.client.errors import INTERRUPTED, JOB_DID_NOT_SUCCEED, fail
from app.client.http import Client, FairgpuError
from app.client.render import clock, live_line, out, task_table
from app.models import BillingRecord, Status, TaskStatus


def watch_to_end(client: Client, task_id: str, as_json: bool) -> None:
    """Follow a job until it ends, then show it; exit 3 unless it succeeded."""
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
        out().print(task_table(last, bill(client, last)))
    if last.status is not Status.SUCCESS:
        raise typer.Exit(JOB_DID_NOT_SUCCEED)


def bill(client: Client, state: TaskStatus) -> BillingRecord | None:
    """The job's charge once it has ended (a REVOKED one may have none)."""
    return client.cost_of(state.task_id) if state.status.terminal else None


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
