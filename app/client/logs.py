"""`fairgpu logs ID [--tail N] [--follow]`: a job's kept log lines, then, with --follow, its new
ones as they come, until it ends.

No line twice, none missed: the kept lines come from GET /tasks/{id}/logs, then the job's event
stream is read from its start. The stream replays every log event the job has had, so a streamed
line is printed only if it is not one of the lines already printed (the same time, stream and
text, counted: a line printed twice by the job is printed twice) and is not older than the
first of them (with --tail, or once the server has dropped its oldest lines, the replay goes
further back than what was printed). Lines written between the two requests are in the stream.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Annotated

import typer
from rich.console import Console

from app.client.errors import INTERRUPTED, JOB_DID_NOT_SUCCEED, fail, session
from app.client.follow import dropped_note
from app.client.http import Client, LogBatch
from app.client.options import JsonOption, KeyOption, TaskId, UrlOption
from app.client.render import log_text, out
from app.client.transport import DEFAULT_URL, RequestError
from app.models import LogLine, Status, TaskStatus

Key = tuple[float, str, str]


def logs(
    task_id: TaskId,
    tail: Annotated[
        int | None, typer.Option(min=1, help="only the last N lines (default: all kept)")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="then print new lines until the job ends")
    ] = False,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a job's log lines (stdout, stderr and its own log calls), oldest first.

    --json prints one JSON object a line. --follow exits 3 when the job fails or is revoked."""
    with session(url, key) as client:
        kept = client.logs(task_id, tail)
        for line in kept:
            _show(line, as_json)
        if not follow:
            return
        try:
            last = follow_logs(client, task_id, kept, as_json)
        except KeyboardInterrupt:
            raise typer.Exit(INTERRUPTED) from None
    if last.status is not Status.SUCCESS:
        reason = f": {last.error}" if last.error else ""
        fail(f"the job ended {last.status.value}{reason}", JOB_DID_NOT_SUCCEED)


def follow_logs(client: Client, task_id: str, shown: list[LogLine], as_json: bool) -> TaskStatus:
    """Print the job's new log lines from its stream until it ends; its last status."""
    cut = LogCut(shown)
    last: TaskStatus | None = None
    for event in client.events(task_id):
        if isinstance(event, TaskStatus):
            last = event
        elif isinstance(event, LogBatch):
            for line in cut.new(event.lines):
                _show(line, as_json)
            if event.dropped and cut.passed:
                # on stderr: stdout holds the lines alone, for a pipe or a --json reader
                notes().print(dropped_note(event.dropped, task_id), soft_wrap=True)
    if last is None:
        raise RequestError("the event stream ended without a status")
    return last


class LogCut:
    """Which streamed lines are new, given the lines already printed (see the module's doc)."""

    def __init__(self, shown: list[LogLine]) -> None:
        self._unseen: Counter[Key] = Counter(_key(line) for line in shown)
        self._since = shown[0].at if shown else None
        self.passed = not shown  # whether the stream has gone past what was printed

    def new(self, lines: list[LogLine]) -> Iterator[LogLine]:
        """The lines not printed yet, in order."""
        for line in lines:
            key = _key(line)
            if self._unseen[key] > 0:
                self._unseen[key] -= 1
            elif self._since is None or line.at >= self._since:
                self.passed = True
                yield line


def notes() -> Console:
    """The console for what is said about the lines rather than the lines: stderr."""
    return Console(stderr=True, highlight=False, markup=False)


def _key(line: LogLine) -> Key:
    return (line.at, line.stream, line.text)


def _show(line: LogLine, as_json: bool) -> None:
    if as_json:
        typer.echo(line.model_dump_json())
    else:
        out().print(log_text(line), soft_wrap=True)
