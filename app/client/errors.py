"""How a client command fails: one line on stderr and an exit code, never a traceback or a
framed panel, so that scripts can rely on the code and people can read the line."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NoReturn

import typer

# typer (0.29 on) ships its own copy of click and exports neither its UsageError nor its base
# Context: `click.UsageError` is another class that typer never raises, so these two names can
# only come from the private module.
from typer._click import Context as ClickContext
from typer._click.exceptions import NoSuchOption, UsageError
from typer.core import TyperCommand

from app.client.http import Client
from app.client.transport import RequestError, one_line

USAGE = 2  # exit code of a command given wrong arguments, as click uses
FAILED = 1  # exit code when the server refuses or cannot be reached
JOB_DID_NOT_SUCCEED = 3  # exit code of a watch whose job ended FAILURE or REVOKED
INTERRUPTED = 130  # exit code after Ctrl-C, as a shell reports SIGINT


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
            message = self._negative_number(exc) or one_line(exc.format_message())
            typer.echo(f"fairgpu {info_name}: {message}", err=True)
            raise typer.Exit(USAGE) from None

    def _negative_number(self, exc: UsageError) -> str | None:
        """What to say when a negative duration was read as an option (`submit short -5`):
        that it is not a valid duration, rather than "No such option: -5"."""
        if not isinstance(exc, NoSuchOption) or not _is_number(exc.option_name):
            return None
        if not any(p.param_type_name == "argument" and p.name == "duration" for p in self.params):
            return None
        return f"DURATION must be a number of seconds above 0, not {exc.option_name}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


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
        except RequestError as exc:
            fail(str(exc), FAILED)
