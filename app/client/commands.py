"""The commands for one account's jobs: submit, status, watch, cancel, tasks, billing, account
and types. Tables for people, `--json` for scripts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from app.client.admin_tables import other_limits
from app.client.errors import USAGE, fail, session
from app.client.follow import bill, watch_to_end
from app.client.http import Client
from app.client.options import (
    GpuClassOption,
    GpuMemoryOption,
    GpusOption,
    JsonOption,
    KeyOption,
    TaskId,
    UrlOption,
)
from app.client.render import (
    about,
    billing_table,
    fields_table,
    out,
    task_table,
    tasks_table,
    types_table,
)
from app.client.run_args import gpu_need
from app.client.transport import DEFAULT_URL, RequestError
from app.client.words import money, span
from app.models import EnqueueResponse, Kind, Status, TaskPage, TaskStatus


def submit(
    kind: Annotated[
        Kind | None,
        typer.Argument(
            metavar="KIND", help="a burn job's queue: short (up to 60 s) or long (up to 3000 s)"
        ),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Argument(
            metavar="DURATION", help="the seconds the burn job runs (wall-clock, on one GPU)"
        ),
    ] = None,
    job_type: Annotated[
        str | None, typer.Option("--type", help="a job of this type (see `fairgpu types`)")
    ] = None,
    job_input: Annotated[
        str | None,
        typer.Option("--input", help="with --type: its input, as JSON or @FILE holding JSON"),
    ] = None,
    budget: Annotated[
        float | None,
        typer.Option(
            "--duration",
            help="with --type: its time limit, wall-clock s whatever its --gpus (default: the "
            "most)",
        ),
    ] = None,
    queue: Annotated[
        Kind | None, typer.Option("--kind", help="with --type: its queue (default: the type's)")
    ] = None,
    gpu_class: GpuClassOption = None,
    gpu_memory: GpuMemoryOption = None,
    gpus: GpusOption = None,
    watch_it: Annotated[
        bool,
        typer.Option("--watch", help="follow the job to its end: status, progress and log lines"),
    ] = False,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="submit at most once per key: a retry returns the same task"),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Submit a job: KIND DURATION (a burn job) or --type NAME [--input JSON].

    With --watch, follow it to its end. --gpu-class and --gpu-memory say what it needs of its
    card, in a mixed fleet; --gpus N, how many cards it takes on one host."""
    once, need = idempotency_key, gpu_need(gpu_class, gpu_memory)
    if job_type is None:
        burn = _burn_job(kind, duration, job_input, budget, queue)
        what = f"{burn[0]}, {span(burn[1])}"

        def send(client: Client) -> EnqueueResponse:
            if need is not None or gpus is not None:  # (the short body has neither: a typed
                # burn job has both, and the server says how many cards a burn job takes)
                return client.submit_job(
                    "burn",
                    None,
                    duration_s=burn[1],
                    kind=burn[0],
                    idempotency_key=once,
                    gpu=need,
                    gpus=gpus,
                )
            return client.submit(*burn, idempotency_key=once)

    else:
        if kind is not None or duration is not None:
            fail("give KIND DURATION, or --type NAME, not both", USAGE)
        name, parsed = job_type, _input(job_input)
        what = f"{name}, " + ("its longest budget" if budget is None else f"up to {span(budget)}")

        def send(client: Client) -> EnqueueResponse:
            return client.submit_job(
                name,
                parsed,
                duration_s=budget,
                kind=queue,
                idempotency_key=once,
                gpu=need,
                gpus=gpus,
            )

    with session(url, key) as client:
        _submitted(client, send(client), what, watch_it=watch_it, as_json=as_json)


def _burn_job(
    kind: Kind | None,
    duration: float | None,
    job_input: str | None,
    budget: float | None,
    queue: Kind | None,
) -> tuple[Kind, float]:
    """KIND and DURATION of a burn job; a usage error without them, or with --type's options."""
    if job_input is not None or budget is not None or queue is not None:
        fail("--input, --duration and --kind go with --type NAME", USAGE)
    if kind is None or duration is None:
        fail("give KIND DURATION (a burn job), or --type NAME", USAGE)
    return kind, duration


def _input(given: str | None) -> object:
    """The value of --input: JSON, or @FILE to read it from; {} when none is given."""
    if given is None:
        return {}
    text = given
    if given.startswith("@"):
        try:
            text = Path(given[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"--input {given}: cannot read it: {exc}", USAGE)
    try:
        return json.loads(text)
    except ValueError as exc:
        fail(f"--input is not JSON: {exc}", USAGE)


def _submitted(
    client: Client, reply: EnqueueResponse, what: str, *, watch_it: bool, as_json: bool
) -> None:
    """Say what was submitted, then follow it with --watch."""
    if not watch_it:
        if as_json:
            typer.echo(reply.model_dump_json())
        else:
            out().print(about("Submitted ", reply.task_id, f" ({what})."))
            out().print(f"Follow it: fairgpu watch {reply.task_id}", style="dim")
        return
    if not as_json:
        out().print(about("Submitted ", reply.task_id, f" ({what})."))
    try:
        watch_to_end(client, reply.task_id, as_json)
    except RequestError as exc:
        # Say which task, or a script that failed to watch it would not know it exists.
        raise RequestError(f"{exc} (watching {reply.task_id}, which was submitted)") from None


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
        out().print(task_table(state, bill(client, state)))


def watch(
    task_id: TaskId,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Follow a job until it ends: its status, progress bar and log lines as they come.

    --json prints one status a line. Exits 3 when the job fails or is revoked."""
    with session(url, key) as client:
        watch_to_end(client, task_id, as_json)


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
            out().print(about("Asked ", task_id, " to stop" + stop))
        else:
            out().print(about("Revoked ", task_id, ": it was still queued and is not billed."))


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
            console = out()
            console.print(tasks_table(found, console.width))
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
    start: Annotated[
        str | None, typer.Option("--from", help="billed from this time (ISO 8601 or Unix s)")
    ] = None,
    end: Annotated[str | None, typer.Option("--to", help="billed before this time")] = None,
    before: Annotated[
        str | None, typer.Option(help="older than this task's bill (the last one shown)")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="every record, page after page")] = False,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """List what your account has been charged, newest first."""
    with session(url, key) as client:
        if every:
            bills = list(client.all_billing(start=start, end=end))
        else:
            bills = client.billing(limit, start=start, end=end, before=before)
        if as_json:
            typer.echo("[" + ",".join(b.model_dump_json() for b in bills) + "]")
        elif not bills:
            out().print("No charges.")
        else:
            console = out()
            console.print(billing_table(bills, console.width))


def account(
    url: UrlOption = DEFAULT_URL, key: KeyOption = None, as_json: JsonOption = False
) -> None:
    """Show the account your key belongs to."""
    with session(url, key) as client:
        who = client.account()
        if as_json:
            typer.echo(who.model_dump_json())
            return
        table = fields_table()
        table.add_row("account", who.user_id)
        table.add_row("description", who.description)
        table.add_row("share", f"{who.share:g}")
        table.add_row("admin", "yes" if who.admin else "no")
        table.add_row("max queued", f"{who.max_queued} per queue")
        if who.max_running is not None:
            table.add_row("max running", f"{who.max_running} at once")
        if who.max_held_gpu_seconds is not None:
            table.add_row("max held", f"{who.max_held_gpu_seconds:g} GPU-s ahead of running jobs")
        for name, value in other_limits(who):
            if value is not None:
                table.add_row(name, f"{value:g}")
        month = who.month
        table.add_row(
            f"billed in {month.month}",
            f"{month.billed_seconds:g} GPU-s, {money(month.cost_micros)}",
        )
        if month.held_seconds:
            held = round(month.held_cost * 1_000_000)
            table.add_row("held", f"{month.held_seconds:g} GPU-s, {money(held)} (jobs not ended)")
        if month.left_gpu_seconds is not None:
            table.add_row(
                "GPU-s budget",
                f"{month.budget_gpu_seconds:g} a month, {max(month.left_gpu_seconds, 0):g} left",
            )
        if month.left_cost is not None and month.budget_cost is not None:
            budget, left = (round(x * 1_000_000) for x in (month.budget_cost, month.left_cost))
            table.add_row("cost budget", f"{money(budget)} a month, {money(max(left, 0))} left")
        out().print(table)


def types(url: UrlOption = DEFAULT_URL, key: KeyOption = None, as_json: JsonOption = False) -> None:
    """List the job types: queue, longest budget, whether each can run here.

    --json gives the JSON Schemas of their input and output as well."""
    with session(url, key) as client:
        found = client.job_types()
        if as_json:
            typer.echo("[" + ",".join(t.model_dump_json() for t in found) + "]")
        elif not found:
            out().print("No job types.")
        else:
            console = out()
            console.print(types_table(found, console.width))


def _json_page(found: list[TaskStatus], next_cursor: str | None) -> str:
    """The shape of GET /tasks, also for --all (every page in one, with no next cursor)."""
    return TaskPage(tasks=found, next_cursor=next_cursor).model_dump_json()
