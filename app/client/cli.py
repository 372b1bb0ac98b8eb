"""The `fairgpu` command. `fairgpu dev` runs the whole stack on this machine (app/dev, imported
only by that command); the client commands (run, submit, status, watch, ...) talk to a running one
over HTTP, and load neither Celery, Redis's client nor the API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from app.client.admin import admin, drop, promote, queues, release
from app.client.artifacts import artifacts
from app.client.commands import account, billing, cancel, status, submit, tasks, types, watch
from app.client.errors import OneLineUsage
from app.client.logs import logs
from app.client.operators import register
from app.client.options import RootKeyOption, RootUrlOption
from app.client.run_command import run
from app.client.transport import DEFAULT_URL
from app.client.usage import usage

cli = typer.Typer(
    help="fairgpu: fair GPU job scheduling. --url and --key go before or after the command.",
    no_args_is_help=True,
)


@cli.callback()
def _root(url: RootUrlOption = DEFAULT_URL, key: RootKeyOption = None) -> None:
    """fairgpu: fair GPU job scheduling. --url and --key go before or after the command."""


@cli.command()
def dev(
    port: Annotated[int, typer.Option(help="port of the API on 127.0.0.1")] = 8000,
    workers: Annotated[
        int | None, typer.Option(min=1, max=16, help="CPU workers to start (default 1)")
    ] = None,
    worker: Annotated[
        list[str] | None,
        typer.Option(
            metavar="CLASS[@HOST]",
            help="start a CPU worker acting as a card of this class of GPU_CLASSES on this "
            "simulated host (default: this machine's); repeat it for a fleet, in place of "
            "--workers",
        ),
    ] = None,
    redis_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="port of the embedded Redis (default: EMBEDDED_REDIS_PORT, else a free one)",
        ),
    ] = None,
) -> None:
    """Run the whole stack here, restarting what dies, until Ctrl-C.

    Redis (REDIS_URL when reachable, else an embedded one), the API, CPU workers (or a fleet
    of classes and hosts: --worker) and the periodic reclaim."""
    from app.dev import console  # the server stack: loaded only to run it

    console.run(port, workers, redis_port, worker or ())


def _register(cli: typer.Typer) -> None:
    """Add the client commands, and the `admin` group, to the `fairgpu` command."""
    # The order here is the order of `fairgpu --help`: `run` first, the command learnt first.
    # Its command's own options (`python train.py --lr 0.1`) are its, not run's, even without --.
    cli.command(cls=OneLineUsage, context_settings={"allow_interspersed_args": False})(run)
    commands: list[Callable[..., None]] = [
        submit,
        status,
        watch,
        logs,
        artifacts,
        cancel,
        tasks,
        billing,
        usage,
    ]
    for command in [*commands, account, types, queues]:
        cli.command(cls=OneLineUsage)(command)
    admin_commands: list[Callable[..., None]] = [promote, release, drop]
    for command in admin_commands:
        admin.command(cls=OneLineUsage)(command)
    register(admin)
    cli.add_typer(admin, name="admin")


_register(cli)


def main() -> None:
    """The console script's entry point."""
    cli()


if __name__ == "__main__":
    main()
