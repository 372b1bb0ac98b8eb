"""The dev stack's simulated fleet: which CPU workers it starts, each acting as a card of a class
of GPU_CLASSES on a host of its own (`fairgpu dev --worker CLASS[@HOST]`), so that a mixed fleet
over several hosts can be tried on one machine.

Without --worker flags the fleet is `--workers N` plain CPU workers, started exactly as before
the catalog (no WORKER_GPU_CLASS: each takes the catalog's first class, or none). A flag names a
class the catalog declares; with GPU_CLASSES unset there is no class to name, and the flag is
refused with a line that says so, rather than a dev catalog made up behind the user's back.
Everything is checked here, before a process starts.
"""

from __future__ import annotations

import re
import socket
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.fleet.catalog import Catalog

#: As many workers as `--workers` allows: each is a Celery process and a warm child.
MAX_WORKERS = 16
#: A simulated host is a name as a machine's would be: it ends Celery's node name <name>@<host>.
HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
EXAMPLE = (
    'GPU_CLASSES=\'{"big": {"memory_gb": 80, "price": 2.0}, "small": {"memory_gb": 24, '
    '"price": 1.0}}\' fairgpu dev --worker big --worker small@host2'
)


class FleetSpecError(ValueError):
    """A --worker flag, or the flags together, cannot make a fleet: one line for the user."""


@dataclass(frozen=True)
class FleetWorker:
    """One worker of the dev stack: its process name, the class it acts as (None: as a plain
    CPU worker, the catalog's first class) and its simulated host."""

    name: str
    host: str
    gpu_class: str | None = None
    #: Its own environment on top of the stack's: the class and host it acts as, and the
    #: name <name>@<host> (none for a plain worker, which the stack names as it always did).
    env: dict[str, str] = field(default_factory=dict, compare=False)


def plain(workers: int, host: str | None = None) -> list[FleetWorker]:
    """`workers` plain CPU workers, cpu1 .. cpuN, started as before the catalog."""
    on = host or socket.gethostname()
    return [FleetWorker(f"cpu{i}", on) for i in range(1, workers + 1)]


def parse_worker(text: str, default_host: str) -> tuple[str, str]:
    """`CLASS` or `CLASS@HOST` as (class, host); FleetSpecError for anything else."""
    gpu_class, at, host = text.partition("@")
    if not at:
        host = default_host
    if not gpu_class or not HOST.match(host) or "@" in host:
        raise FleetSpecError(
            f"--worker {text!r}: give CLASS or CLASS@HOST (a host is 1 to 63 of letters, "
            "digits, '.', '_', '-')"
        )
    return gpu_class, host


def plan(
    specs: Sequence[str], workers: int | None, catalog: Catalog, default_host: str | None = None
) -> list[FleetWorker]:
    """The workers `fairgpu dev` starts: one per --worker flag (specs), else `workers` plain CPU
    workers (1 when None). A flag without @HOST is on default_host (WORKER_HOST, else this
    machine's hostname). FleetSpecError, naming the flag, for a class the catalog lacks."""
    host = default_host or socket.gethostname()
    if not specs:
        return plain(1 if workers is None else workers, host)
    if workers is not None:
        raise FleetSpecError(
            "give --workers N or --worker flags, not both: the flags replace the default workers"
        )
    if len(specs) > MAX_WORKERS:
        raise FleetSpecError(f"at most {MAX_WORKERS} --worker flags, not {len(specs)}")
    parsed = [parse_worker(spec, host) for spec in specs]
    if not catalog.declared:
        raise FleetSpecError(
            f"--worker {specs[0]!r} names a class, but GPU_CLASSES (the catalog) is unset; "
            f"set it, for instance {EXAMPLE}"
        )
    for spec, (gpu_class, _) in zip(specs, parsed, strict=True):
        if catalog.by_name(gpu_class) is None:
            raise FleetSpecError(
                f"--worker {spec!r}: {gpu_class!r} is no class of GPU_CLASSES: {catalog.describe()}"
            )
    counts: Counter[str] = Counter()
    fleet = []
    for gpu_class, on in parsed:
        counts[gpu_class] += 1
        name = f"{gpu_class}-{counts[gpu_class]}"  # the '-' keeps "a"'s 11th from "a1"'s 1st
        env = {"WORKER_NAME": f"{name}@{on}", "WORKER_GPU_CLASS": gpu_class, "WORKER_HOST": on}
        fleet.append(FleetWorker(name, on, gpu_class, env))
    return fleet


def describe(fleet: Sequence[FleetWorker], catalog: Catalog) -> str:
    """The banner's line of the fleet, class@host per worker ("" for plain workers without a
    catalog: the banner then says what it always said)."""
    if not catalog.declared:
        return ""
    first = catalog.first.name
    each = [f"{w.name} {w.gpu_class or first}@{w.host}" for w in fleet]
    return f"Fleet: {', '.join(each) or 'no worker'} (GPU_CLASSES: {catalog.describe()})"
