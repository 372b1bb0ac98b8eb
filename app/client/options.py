"""The options and arguments that the client commands share, declared once so that every
command spells, documents and reads them from the environment the same way.

--url and --key may come before the command (`fairgpu --key K status T`) or after it
(`fairgpu status T --key K`); after it wins, then before it, then FAIRGPU_URL and
FAIRGPU_API_KEY, then the default.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

import typer

# typer ships its own copy of click and does not export ParameterSource: see errors.py.
from typer._click.core import ParameterSource

from app.card_models import MAX_GPUS

T = TypeVar("T")
URL_HELP = "the API's base URL"
KEY_HELP = "your API key"


def _or_before_the_command(ctx: typer.Context, param: typer.CallbackParam, value: T) -> T:
    """The option's value: the command's own when given on the command line, else the one given
    before the command, else the environment's or the default."""
    name = param.name
    root = ctx.find_root()
    if name is None or root is ctx or ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
        return value
    if root.get_parameter_source(name) is ParameterSource.COMMANDLINE:
        given: T = root.params[name]
        return given
    return value


UrlOption = Annotated[
    str,
    typer.Option(
        "--url",
        envvar="FAIRGPU_URL",
        help=URL_HELP,
        show_envvar=True,
        callback=_or_before_the_command,
    ),
]
KeyOption = Annotated[
    str | None,
    typer.Option(
        "--key",
        envvar="FAIRGPU_API_KEY",
        help=KEY_HELP,
        show_default=False,
        show_envvar=True,
        callback=_or_before_the_command,
    ),
]
#: The same two on the `fairgpu` command itself, before any client command.
RootUrlOption = Annotated[
    str, typer.Option("--url", envvar="FAIRGPU_URL", help=URL_HELP, show_envvar=True)
]
RootKeyOption = Annotated[
    str | None,
    typer.Option(
        "--key", envvar="FAIRGPU_API_KEY", help=KEY_HELP, show_default=False, show_envvar=True
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON for scripts, not tables")]
TaskId = Annotated[str, typer.Argument(help="the task's id, as submit printed it")]
#: What a submitted job needs of its card, in a mixed fleet (`fairgpu submit`, `fairgpu run`):
#: the server's catalog checks both (run_args.gpu_need makes the body's `gpu` of them).
GpuClassOption = Annotated[
    list[str] | None,
    typer.Option(
        "--gpu-class",
        metavar="CLASS",
        help="a class of card it may run on (GPU_CLASSES); repeat for more",
        show_default=False,
    ),
]
#: The cards a submitted job takes, all of one class on one host (`fairgpu submit`, `fairgpu
#: run`): the body's `gpus`; left out, the job type's least (GET /job-types min_gpus).
GpusOption = Annotated[
    int | None,
    typer.Option(
        "--gpus",
        metavar="N",
        min=1,
        max=MAX_GPUS,
        help="the GPUs it takes, all on one host (default: its type's least, 1 for a script); "
        "its DURATION stays wall-clock seconds, so it uses N x DURATION GPU-seconds",
        show_default=False,
    ),
]
GpuMemoryOption = Annotated[
    float | None,
    typer.Option(
        "--gpu-memory",
        metavar="GB",
        help="the card memory it needs, in GB: only classes that hold it run it",
        show_default=False,
    ),
]
