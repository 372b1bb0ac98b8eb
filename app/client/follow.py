"""Following a job to its end, as `watch`, `submit --watch` and `run` do: on a terminal, a live
status line with a progress bar under it and the job's log lines printed above; in a log or a
pipe, one line per change and per log line; or one JSON status per line for scripts."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from app.client.errors import INTERRUPTED, JOB_DID_NOT_SUCCEED, fail
from app.client.http import Client, JobEvent, LogBatch
from app.client.render import live_line, log_text, out, progress_bar, progress_text, task_table
from app.client.transport import RequestError
from app.client.words import clock
from app.models import Progress, Status, TaskStatus
from app.usage_models import BillingRecord


def watch_to_end(client: Client, task_id: str, as_json: bool) -> None:
    """Follow a job until it ends, then show it; exit 3 unless it succeeded."""
    try:
        if as_json:
            last = _follow_json(client, task_id)
        else:
            last = Follower(task_id).follow(client.events(task_id))
    except KeyboardInterrupt:
        fail(f"stopped watching {task_id}; the job goes on (fairgpu cancel {task_id})", INTERRUPTED)
    if not as_json:
        out().print(task_table(last, bill(client, last)))
    if last.status is not Status.SUCCESS:
        raise typer.Exit(JOB_DID_NOT_SUCCEED)


def bill(client: Client, state: TaskStatus) -> BillingRecord | None:
    """The job's charge once it has ended (a REVOKED one may have none)."""
    return client.cost_of(state.task_id) if state.status.terminal else None


def dropped_note(count: int, task_id: str) -> Text:
    """What to say when the server's throttle left log lines out of the stream."""
    lines = "line was" if count == 1 else "lines were"
    return Text(f"… {count} log {lines} left out here (fairgpu logs {task_id} has them)", "dim")


@dataclass
class _Seen:
    """What the stream has said so far: the job's last status and progress."""

    task_id: str
    last: TaskStatus | None = None
    progress: Progress | None = field(default=None)

    def take(self, event: JobEvent) -> list[Text]:
        """Note the event; the log lines it brings, to print."""
        if isinstance(event, TaskStatus):
            self.last, self.progress = event, event.progress  # the job's progress as of then
        elif isinstance(event, Progress):
            self.progress = event
        else:
            return self._lines(event)
        return []

    def _lines(self, batch: LogBatch) -> list[Text]:
        now = time.time()
        shown = [log_text(line, now) for line in batch.lines]
        if batch.dropped:
            shown.append(dropped_note(batch.dropped, self.task_id))
        return shown

    @property
    def running(self) -> bool:
        return self.last is not None and self.last.status is Status.STARTED


def _follow_json(client: Client, task_id: str) -> TaskStatus:
    """One status per line: the JSON of GET /task-status (`fairgpu logs` has the lines)."""
    last = None
    for state in client.watch(task_id):
        typer.echo(state.model_dump_json())
        last = state
    return _ended(last)


class Follower:
    """Shows one job's events on this console until it ends: on a terminal (`live`), a spinner
    and a status line redrawn as events come and as the clock moves, a progress bar under it
    while the job runs, its log lines printed above; elsewhere (a log, a pipe), one line per
    change of status or progress and one per log line. It keeps what it has shown, so a follow
    stopped by Ctrl-C and taken up again (from the stream's place) shows nothing twice."""

    def __init__(self, task_id: str, *, live: bool | None = None) -> None:
        self.seen = _Seen(task_id)
        self.view = _Lines()
        self.live = out().is_terminal if live is None else live

    def follow(self, events: Iterable[JobEvent]) -> TaskStatus:
        """Show the events until the stream ends; the job's last status."""
        if self.live:
            self._live(events)
        else:
            self._lines(events)
        return _ended(self.seen.last)

    def _live(self, events: Iterable[JobEvent]) -> None:
        spinner, seen = Spinner("dots"), self.seen

        def render() -> RenderableType:
            last = seen.last
            text = Text("connecting...") if last is None else live_line(last, time.time())
            spinner.update(text=text)
            if seen.progress is None or not seen.running:
                return spinner
            return Group(spinner, progress_bar(seen.progress))

        with Live(console=out(), get_renderable=render, transient=True, refresh_per_second=4) as on:
            for event in events:
                for line in seen.take(event):
                    on.console.print(line, soft_wrap=True)

    def _lines(self, events: Iterable[JobEvent]) -> None:
        console, seen = out(), self.seen
        for event in events:
            first = seen.last is None
            for line in seen.take(event):
                console.print(line, soft_wrap=True)
            change = self.view.change(event, time.time(), first=first, running=seen.running)
            if change is not None:
                console.print(change, soft_wrap=True)


@dataclass
class _Lines:
    """The last status line and progress printed, so that only changes are printed."""

    status_shown: str = ""
    progress_shown: str = ""

    def change(self, event: JobEvent, now: float, *, first: bool, running: bool) -> Text | None:
        """The line to print for a status or progress event, if it says something new."""
        if isinstance(event, TaskStatus):
            return self.status(event, now, first=first)
        if isinstance(event, Progress) and running:
            return self.progress(event, now)
        return None

    def status(self, state: TaskStatus, now: float, *, first: bool) -> Text | None:
        line = live_line(state, now, ticking=False)
        if line.plain == self.status_shown:
            return None
        self.status_shown = line.plain
        return Text(clock(_moment(state, now, first=first), now) + " ").append_text(line)

    def progress(self, progress: Progress, now: float) -> Text | None:
        said = progress_text(progress)
        if said == self.progress_shown:
            return None
        self.progress_shown = said
        return Text(f"{clock(now, now)} progress {said}")


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
        raise RequestError("the event stream ended without a status")
    return last
