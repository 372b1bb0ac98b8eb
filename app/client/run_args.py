"""What `fairgpu run` reads from its command line, checked before anything is packed or sent:
the time budget (`2h`, `90m`, `1h30m`, `45`), the GPUs, the variables given to the script and
the command itself. Each function raises ArgumentError with one line that names the problem."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping

#: The script job's limits on its input, as its input model on the server holds them
#: (app/jobs/builtin/script.py; tests/client/test_run_command.py checks they agree).
MAX_COMMAND_ITEMS = 256
MAX_COMMAND_ITEM_CHARS = 8192
MAX_ENV_ITEMS = 256
MAX_ENV_VALUE_CHARS = 32768
#: Names the script's environment keeps for itself (the server refuses them too, with a 422):
#: the service's own variables, the GPU's, the loader's and the interpreter's.
REFUSED_PREFIXES = ("FAIRGPU_", "CUDA_", "LD_", "PYTHON")
REFUSED_NAMES = frozenset({"PATH"})
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(d|h|min|m|s)")


class ArgumentError(Exception):
    """A command line `fairgpu run` cannot carry out; str() is one line naming what is wrong."""


def parse_duration(text: str) -> float:
    """A time budget in seconds: a number of seconds (`45`, `2.5`), or amounts with units, d, h,
    m (or min) and s, largest first and each at most once (`2h`, `90m`, `1h30m`, `1.5h`)."""
    given = text.strip().lower()
    try:
        seconds = float(given)
    except ValueError:
        seconds = _with_units(given, text)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ArgumentError(f"--duration {text}: give a time above 0, such as 45 (s), 90m or 2h")
    return seconds


def _with_units(given: str, text: str) -> float:
    parts = DURATION_PART.findall(given)
    units = [UNITS[unit] for _, unit in parts]
    whole = "".join(amount + unit for amount, unit in parts)
    if not parts or whole != given or units != sorted(set(units), reverse=True):
        raise ArgumentError(
            f"--duration {text}: not a time; give seconds (45) or amounts with units, "
            "largest first (90m, 2h, 1h30m)"
        )
    return sum(float(amount) * UNITS[unit] for amount, unit in parts)


def gpu_need(classes: list[str] | None, memory_gb: float | None) -> dict[str, object] | None:
    """The submit's `gpu` from --gpu-class and --gpu-memory; None when neither is given (the
    server checks the names and the memory against its catalog: a 422 says what is wrong)."""
    need: dict[str, object] = {}
    if classes:
        need["classes"] = classes
    if memory_gb is not None:
        need["min_memory_gb"] = memory_gb
    return need or None


def refused_name(name: str) -> str | None:
    """Why the script may not be given a variable of this name, or None when it may."""
    if not NAME.match(name):
        return "a variable's name is letters, digits and _ (at most 128), not starting with a digit"
    if name in REFUSED_NAMES or name.startswith(REFUSED_PREFIXES):
        kept = ", ".join(f"{p}…" for p in REFUSED_PREFIXES)
        return f"the service sets it (PATH and names starting {kept} are its own)"
    return None


def parse_env(given: Iterable[str], here: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of `--env NAME=VALUE` (or `--env NAME`: this shell's value of NAME), the
    last one given for a name winning; each name checked as the server checks it."""
    here = os.environ if here is None else here
    found: dict[str, str] = {}
    for item in given:
        name, has_value, value = item.partition("=")
        why = refused_name(name)
        if why is not None:
            raise ArgumentError(f"--env {_cut(item)}: {why}")
        if not has_value:
            if name not in here:
                raise ArgumentError(
                    f"--env {name}: no value, and {name} is not set here (give {name}=VALUE)"
                )
            value = here[name]
        if len(value) > MAX_ENV_VALUE_CHARS:
            raise ArgumentError(
                f"--env {name}: its value has {len(value):,} characters, more than the "
                f"{MAX_ENV_VALUE_CHARS:,} a job takes"
            )
        found[name] = value
    if len(found) > MAX_ENV_ITEMS:
        raise ArgumentError(f"{len(found)} variables, more than the {MAX_ENV_ITEMS} a job takes")
    return found


def check_command(command: list[str]) -> list[str]:
    """The command the script job runs (its program and arguments), as the server takes it."""
    if not command:
        raise ArgumentError("give the command to run after --, such as: -- python train.py")
    if len(command) > MAX_COMMAND_ITEMS:
        raise ArgumentError(
            f"the command has {len(command)} words, more than the {MAX_COMMAND_ITEMS} a job takes"
        )
    for word in command:
        if not word:
            raise ArgumentError("the command has an empty word ('')")
        if len(word) > MAX_COMMAND_ITEM_CHARS:
            raise ArgumentError(
                f"a word of the command has {len(word):,} characters, more than the "
                f"{MAX_COMMAND_ITEM_CHARS:,} a job takes: {_cut(word)}"
            )
    return command


def _cut(text: str, most: int = 40) -> str:
    return text if len(text) <= most else text[:most] + "…"
