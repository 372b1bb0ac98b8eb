"""The options and arguments that the client commands share, declared once so that every
command spells, documents and reads them from the environment the same way."""

from __future__ import annotations

from typing import Annotated

import typer

UrlOption = Annotated[
    str, typer.Option("--url", envvar="FAIRGPU_URL", help="the API's base URL", show_envvar=True)
]
KeyOption = Annotated[
    str | None,
    typer.Option(
        "--key", envvar="FAIRGPU_API_KEY", help="your API key", show_default=False, show_envvar=True
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON for scripts, not tables")]
TaskId = Annotated[str, typer.Argument(help="the task's id, as submit printed it")]
