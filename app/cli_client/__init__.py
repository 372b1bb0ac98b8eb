"""The `fairgpu` client commands: submit, status, watch, cancel, tasks, billing, account, queues
and `admin promote/release/drop`, over HTTP with app.client. Tables for people, `--json` for
scripts; every failure is one line on stderr and a non-zero exit code.

commands.py holds one account's job commands and admin.py the operators'; follow.py follows a
job to its end; render.py is everything printed for people; errors.py turns every failure into
one line and an exit code; options.py the options all commands share."""

from __future__ import annotations

from collections.abc import Callable

import typer

from app.cli_client.admin import admin, drop, promote, queues, release
from app.cli_client.commands import account, billing, cancel, status, submit, tasks, watch
from app.cli_client.errors import OneLineUsage
from app.cli_client.render import eta, place, span

__all__ = ["eta", "place", "register", "span"]


def register(cli: typer.Typer) -> None:
    """Add the client commands, and the `admin` group, to the `fairgpu` command."""
    # The order here is the order of `fairgpu --help`.
    commands: list[Callable[..., None]] = [submit, status, watch, cancel, tasks, billing]
    for command in [*commands, account, queues]:
        cli.command(cls=OneLineUsage)(command)
    admin_commands: list[Callable[..., None]] = [promote, release, drop]
    for command in admin_commands:
        admin.command(cls=OneLineUsage)(command)
    cli.add_typer(admin, name="admin")
