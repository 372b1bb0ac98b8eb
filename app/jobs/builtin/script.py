"""script: runs an account's own project (uploaded with POST /code) in its own environment, in
the sandbox. Its input names the code, the command and any variables; its output is the JSON the
script wrote to $FAIRGPU_OUTPUT (null when it wrote none). docs/scripts.md says what a script
sees and how it is stopped; app/scripting/run.py runs it.

Its time limits are its queues' (MAX_SHORT_S, MAX_LONG_S): the type's own bound is far above
them. Whether a run may be asked to yield is each job's own choice (the submit's
`"preemptible": true`), not the type's. The worker's side is imported in setup() only: the API
imports this module to read its schemas."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator

from app.card_models import MAX_GPUS
from app.jobs.context import JobContext
from app.jobs.registry import job

#: The type's own time bound, above any queue's limit, so that the queue's rules.
MAX_SCRIPT_S = 30 * 86400
MAX_COMMAND_ITEMS = 256
MAX_ARGUMENT_CHARS = 8192
MAX_ENV_ITEMS = 256
MAX_ENV_VALUE_CHARS = 32768
#: Variable names a shell would take: a letter or an underscore, then letters, digits, underscores.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
#: Prefixes of the names the service sets or that change how programs load (refused).
REFUSED_PREFIXES = ("FAIRGPU_", "CUDA_", "LD_", "PYTHON")
REFUSED_NAMES = frozenset({"PATH"})

Argument = Annotated[str, Field(min_length=1, max_length=MAX_ARGUMENT_CHARS)]


class ScriptIn(BaseModel):
    """The code to run, the command that runs it, and the variables it gets beside the
    service's own."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="a code id from POST /code (the archive's SHA-256)"
    )
    command: list[Argument] = Field(
        min_length=1,
        max_length=MAX_COMMAND_ITEMS,
        description='the command, run in the project\'s folder: ["python", "train.py", "--lr", '
        '"0.1"]',
    )
    env: dict[str, Annotated[str, Field(max_length=MAX_ENV_VALUE_CHARS)]] = Field(
        default_factory=dict,
        max_length=MAX_ENV_ITEMS,
        description="variables for the script; names starting FAIRGPU_, CUDA_, LD_ or PYTHON, "
        "and PATH, are refused",
    )

    @field_validator("command")
    @classmethod
    def _no_nul_in_arguments(cls, command: list[str]) -> list[str]:
        if any("\0" in argument for argument in command):
            raise ValueError("an argument may not hold a NUL character")
        return command

    @field_validator("env")
    @classmethod
    def _allowed_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if not ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a variable name (a letter or _, then letters, digits, _)"
                )
            if name in REFUSED_NAMES or name.startswith(REFUSED_PREFIXES):
                raise ValueError(
                    f"{name!r} is the service's to set: names starting FAIRGPU_, CUDA_, LD_ or "
                    "PYTHON, and PATH, are refused"
                )
            if "\0" in value:
                raise ValueError(f"the value of {name!r} holds a NUL character")
        return env


class ScriptOut(RootModel[Any]):
    """The JSON the script wrote to $FAIRGPU_OUTPUT; null when it wrote none."""

    root: Any = None


@job(
    name="script",
    queue="short",
    max_duration_s=MAX_SCRIPT_S,
    description="Runs your own uploaded project's command in its environment, in a sandbox.",
    # any count a job may take: its real cap, the fleet's largest host, is checked at submit
    gpus=(1, MAX_GPUS),
)
class Script:
    """Runs your own uploaded project's command in its environment, in a sandbox."""

    def __init__(self) -> None:
        self._runner: Any = None

    def setup(self, ctx: JobContext) -> None:
        """Make the runner from the worker's settings: its sandbox checked (a worker that cannot
        confine scripts refuses them here, unless SCRIPT_SANDBOX=none), its caches' folders."""
        from app.scripting.worker import runner_from_settings

        self._runner = runner_from_settings()

    def run(self, ctx: JobContext, inp: ScriptIn) -> ScriptOut:
        """Run the command; the output file's JSON."""
        if self._runner is None:
            self.setup(ctx)
        return ScriptOut(self._runner.run(ctx, inp.code, inp.command, inp.env))
