"""What the CLI's tests share."""

from __future__ import annotations

import functools

import typer.main
import typer.testing

# typer's CliRunner builds the click command from the Typer app at every invoke (some 50 ms for
# this CLI, most of a CLI test's time); the installed `fairgpu` builds it once per process, and
# so do the tests now. The command is the same object it would build again.
typer.testing._get_command = functools.cache(typer.main.get_command)  # type: ignore[attr-defined]
