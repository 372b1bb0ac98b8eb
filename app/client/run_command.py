"""`fairgpu run [OPTIONS] -- COMMAND...`: run this folder's project as a script job and follow it
to its end, as if it ran here.

It packs the current folder (app/client/pack.py), uploads it unless the server holds that code
for the account already (the code's id is the archive's SHA-256, so GET /code/{id} tells), submits
a `script` job, shows its log lines and progress as they come (follow.py), then its result, cost
and artifacts, and exits with the script's exit code (run_outcome.py has the mapping and the
Ctrl-C rule; docs/scripts.md says both for users)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer

from app.client.artifacts import fetch_all, no_artifacts, say_saved
from app.client.errors import FAILED, INTERRUPTED, USAGE, fail, session
from app.client.follow import Follower, bill
from app.client.http import Client, StreamPlace
from app.client.options import (
    GpuClassOption,
    GpuMemoryOption,
    GpusOption,
    KeyOption,
    UrlOption,
)
from app.client.pack import PackError, pack
from app.client.render import about, out
from app.client.run_args import (
    ArgumentError,
    check_command,
    gpu_need,
    parse_duration,
    parse_env,
)
from app.client.run_outcome import ask_to_cancel, exit_code, result_table
from app.client.transport import DEFAULT_URL, RequestError, one_line
from app.client.words import size, span
from app.models import Kind, TaskStatus

SCRIPT = "script"  # the built-in job type of a user's own code
#: What the server answers when the request itself cannot be carried out as given (no
#: run_scripts, too big, a bad field): exit 2, as for a wrong command line.
REFUSED = frozenset({403, 413, 422})
T = TypeVar("T")


def run(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="COMMAND",
            help="what the job runs, in the project's folder (after --)",
            show_default=False,
        ),
    ] = None,
    gpus: GpusOption = None,
    gpu_class: GpuClassOption = None,
    gpu_memory: GpuMemoryOption = None,
    duration: Annotated[
        str | None,
        typer.Option(
            "--duration",
            metavar="TIME",
            help="its time limit, wall-clock whatever its --gpus: 45 (s), 90m, 2h, 1h30m "
            "(default: the most its queue allows)",
            show_default=False,
        ),
    ] = None,
    long: Annotated[
        bool, typer.Option("--long", help="the long queue (longer jobs), not the short one")
    ] = False,
    preemptible: Annotated[
        bool,
        typer.Option(
            "--preemptible",
            help="it may be asked to yield the GPU (SIGTERM) and resumed later from its checkpoint",
        ),
    ] = False,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            metavar="NAME=VALUE",
            help="a variable for the script (NAME alone: this shell's value); repeat for more",
            show_default=False,
        ),
    ] = None,
    include_env: Annotated[
        bool, typer.Option("--include-env", help="send the folder's .env files too (left out else)")
    ] = False,
    download: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            file_okay=False,
            help="fetch its artifacts into DIR once it succeeds (made if missing)",
            show_default=False,
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
) -> None:
    """Run this folder's project as a job, live to its result; exit as its script did.

    It packs the folder, uploads it unless the server has it, follows the job (log, progress),
    then prints its result, cost and artifacts (--download DIR fetches them).

    Options go before the command: fairgpu run --duration 2h -- python train.py --lr 0.1

    Exit codes: the script's own; 124: it ran out of time; 130: it was cancelled; 1: it ended
    for a reason of the service's; 2: a wrong command line, or a request the server refuses.

    Ctrl-C asks whether to cancel the job; without a terminal it leaves it running (exit 130).
    """
    queue: Kind = "long" if long else "short"
    try:
        words = check_command(command or [])
        variables = parse_env(env or [])
        budget = None if duration is None else parse_duration(duration)
    except ArgumentError as exc:
        typer.echo(f"fairgpu run: {exc}", err=True)
        raise typer.Exit(USAGE) from None
    job: dict[str, object] = {"command": words, "env": variables}
    with session(url, key) as client:
        try:
            job["code"] = send_code(client, Path.cwd(), include_env=include_env)
        except KeyboardInterrupt:
            fail("interrupted: nothing was submitted", INTERRUPTED)
        need = gpu_need(gpu_class, gpu_memory)
        task_id = _submit(client, job, budget, queue, preemptible=preemptible, gpu=need, gpus=gpus)
        try:
            state = follow(client, task_id)
            code = _show_result(client, state, download)
        except RequestError as exc:
            # Say which job, or whoever ran this would not know that one exists.
            raise RequestError(f"{exc} (following {task_id}, which was submitted)") from None
        except KeyboardInterrupt:
            fail(f"interrupted; the job has ended (fairgpu status {task_id})", INTERRUPTED)
    raise typer.Exit(code)


def send_code(client: Client, folder: Path, *, include_env: bool) -> str:
    """Pack `folder` and make sure the server holds it for this account: its code id."""
    try:
        packed = pack(folder, include_env=include_env)
    except PackError as exc:
        fail(str(exc), USAGE)
    try:
        console = out()
        for note in packed.notes:
            console.print(f"  {note}", style="dim", soft_wrap=True)
        files = "1 file" if packed.files == 1 else f"{packed.files} files"
        what = f"Packed {files}, {size(packed.bytes)} (code {packed.sha256[:12]})"
        if client.code_info(packed.sha256) is not None:
            console.print(f"{what}: the server has it already, not sent again.", soft_wrap=True)
            return packed.sha256
        console.print(f"{what}: uploading it.", soft_wrap=True)
        stored = _refused_is_usage(lambda: client.upload_code(packed.path))
        if stored.code_id != packed.sha256:
            raise RequestError(
                f"the server stored the upload as {stored.code_id}, not as its SHA-256 "
                f"{packed.sha256}: the archive changed on the way"
            )
        return packed.sha256
    finally:
        packed.discard()


def _submit(
    client: Client,
    job: dict[str, object],
    budget: float | None,
    queue: Kind,
    *,
    preemptible: bool,
    gpu: dict[str, object] | None = None,
    gpus: int | None = None,
) -> str:
    """Submit the script job (with its need of a card and its count of cards, if given); its
    task id."""

    def send() -> str:
        reply = client.submit_job(
            SCRIPT,
            job,
            duration_s=budget,
            kind=queue,
            preemptible=True if preemptible else None,
            gpu=gpu,
            gpus=gpus,
        )
        return reply.task_id

    try:
        task_id = _refused_is_usage(send, long_hint=queue != "long")
    except KeyboardInterrupt:
        fail("interrupted while submitting: `fairgpu tasks` shows whether it was", INTERRUPTED)
    limit = "its queue's most" if budget is None else f"up to {span(budget)}"
    cards = "" if gpus is None or gpus == 1 else f", {gpus} GPUs"
    out().print(about("Submitted ", task_id, f" ({queue} queue, {limit}{cards})."))
    return task_id


def follow(client: Client, task_id: str) -> TaskStatus:
    """Follow the job to its end; its last status. Ctrl-C asks, on a terminal, whether to cancel
    it: yes cancels it and goes on following it to its end (a second Ctrl-C stops following);
    no, or no terminal to ask on, leaves it running and exits 130."""
    place, follower, cancelled = StreamPlace(), Follower(task_id), False
    while True:
        try:
            return follower.follow(client.events(task_id, place))
        except KeyboardInterrupt:
            if cancelled or not ask_to_cancel(_interactive()):
                _left_running(task_id, stopping=cancelled)
        try:
            cancelled = True
            _cancel(client, task_id)
        except KeyboardInterrupt:
            _left_running(task_id, stopping=True)


def _interactive() -> bool:
    """Whether someone is at a terminal to answer the question."""
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):  # no stdin, or a closed one
        return False


def _cancel(client: Client, task_id: str) -> None:
    try:
        _, stopping = client.cancel(task_id)
    except RequestError as exc:
        if exc.status != 409:  # 409: it has ended already, and the stream says how
            raise
        return
    if stopping:
        said = ": it gets SIGTERM, ends REVOKED and is billed for the seconds it ran."
        out().print(about("Asked ", task_id, " to stop" + said))
    else:
        out().print(about("Revoked ", task_id, ": it was still queued and is not billed."))


def _left_running(task_id: str, *, stopping: bool) -> NoReturn:
    state = "is stopping" if stopping else "goes on"
    fail(
        f"stopped following {task_id}; the job {state}. Follow it: fairgpu watch {task_id} "
        f"(its log: fairgpu logs {task_id} --follow); cancel it: fairgpu cancel {task_id}",
        INTERRUPTED,
    )


def _show_result(client: Client, state: TaskStatus, download: Path | None) -> int:
    """Print the job's result, fetch its artifacts with --download; the exit code."""
    out().print(result_table(state, bill(client, state)))
    found = (state.result.artifacts if state.result else None) or []
    code = exit_code(state)
    if download is None:
        if found:
            out().print(
                f"Fetch them: fairgpu artifacts {state.task_id} --download DIR",
                style="dim",
                soft_wrap=True,  # a command to copy: never broken over lines
            )
        return code
    if not found:
        out().print(no_artifacts(state))
        return code
    saved, problems = fetch_all(client, state.task_id, found, download)
    say_saved(state, saved, download, failed=bool(problems))
    for problem in problems:
        typer.echo(f"fairgpu: {one_line(problem)}", err=True)
    return FAILED if problems and code == 0 else code


def _refused_is_usage(call: Callable[[], T], *, long_hint: bool = False) -> T:
    """The call's answer; the server's refusal of the request as given (REFUSED) is one line
    and exit 2, with a hint when the budget asked is past the short queue's."""
    try:
        return call()
    except RequestError as exc:
        if exc.status not in REFUSED:
            raise
        message = str(exc)
        if long_hint and "duration_s must be at most" in message:
            message += " (--long asks for the long queue)"
        if "unknown job type" in message:
            message += f" (this server runs no {SCRIPT} jobs)"
        fail(message, USAGE)
