"""The operators' commands: `queues`, and the `admin` group (promote, release, drop) that only
admin accounts may use."""

from __future__ import annotations

from typing import Annotated

import typer

from app.client.admin_tables import fleet_tables, queues_table, workers_table
from app.client.errors import FAILED, fail, session
from app.client.options import JsonOption, KeyOption, TaskId, UrlOption
from app.client.render import about, out, task_table
from app.client.transport import DEFAULT_URL
from app.models import TaskStatus

admin = typer.Typer(help="Admin actions on queues, jobs, accounts and keys (admin accounts only).")


def queues(
    url: UrlOption = DEFAULT_URL, key: KeyOption = None, as_json: JsonOption = False
) -> None:
    """Show each queue (jobs queued and running, workers, fairness, top accounts), then each
    worker, a broken one with why, then the fleet by class and by host (admins)."""
    with session(url, key) as client:
        view = client.queues()
        if as_json:
            typer.echo(view.model_dump_json())
        else:
            console = out()
            console.print(queues_table(view, console.width))
            if view.workers:
                console.print(workers_table(view, console.width))
            for table in [] if view.fleet is None else fleet_tables(view.fleet, console.width):
                console.print(table)


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
    """Empty a queue: its queued jobs end REVOKED, its running ones are asked to stop."""
    with session(url, key) as client:
        if not yes and not typer.confirm(
            f"Revoke every job in {queue} (queued ones now, running ones asked to stop)?", err=True
        ):
            fail(f"nothing dropped from {queue}", FAILED)
        result = client.drop(queue)
        if as_json:
            typer.echo(result.model_dump_json())
        else:
            out().print(
                f"Dropped {result.dropped} queued job(s) from {result.queue}; "
                f"{result.stopped} running job(s) stopped."
            )


def _print_state(state: TaskStatus, as_json: bool, done: str) -> None:
    if as_json:
        typer.echo(state.model_dump_json())
    else:
        out().print(about(f"{done} ", state.task_id, "."))
        out().print(task_table(state, None))
