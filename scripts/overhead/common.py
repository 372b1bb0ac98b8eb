"""What the benchmarks share: reports and their tables, statistics, child processes, Redis."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from app.dev.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
Row = Sequence[object]


@dataclass
class Section:
    """One table of a report: a title, column names and rows."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Row] = field(default_factory=list)


@dataclass
class Report:
    """What one benchmark found: tables, verdict lines, and raw data for --json."""

    name: str
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def render(self, console: Console) -> None:
        """Print the tables and notes with rich."""
        for section in self.sections:
            table = Table(title=f"{self.name}: {section.title}", title_justify="left")
            for column in section.columns:
                table.add_column(
                    column, justify="left" if column == section.columns[0] else "right"
                )
            for row in section.rows:
                table.add_row(*(cell(value) for value in row))
            console.print(table)
        for note in self.notes:
            console.print(f"- {note}", highlight=False)

    def as_json(self) -> dict[str, Any]:
        """The report as plain data."""
        return {
            "name": self.name,
            "tables": [
                {"title": s.title, "columns": list(s.columns), "rows": [list(r) for r in s.rows]}
                for s in self.sections
            ],
            "notes": self.notes,
            "data": self.data,
        }


def cell(value: object) -> str:
    """A table cell: floats with sensible precision, ints with thousands separators."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: Sequence[float]) -> float:
    """The median; 0 for no values."""
    return statistics.median(values) if values else 0.0


def ratio(mine: float, base: float) -> float:
    """mine / base, or 0 when there is no baseline value."""
    return mine / base if base else 0.0


def met(ok: bool) -> str:
    """A verdict word."""
    return "met" if ok else "NOT met"


def machine() -> str:
    """The machine in one line: cores and load average."""
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} CPU cores, load average {one:.2f} (1 min), {five:.2f} (5 min)"


def log(line: str) -> None:
    """Progress, on stderr."""
    print(line, file=sys.stderr, flush=True)


def alternate(rounds: int, names: Sequence[str]) -> Iterator[tuple[int, str]]:
    """(round, variant) in an order that alternates, reversed every other round (ABBA...), so
    a drift in the machine's load hits every variant alike."""
    for index in range(rounds):
        order = names if index % 2 == 0 else list(reversed(names))
        for name in order:
            yield index, name


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[RedisServer]:
    """An embedded redis-server (never the machine's), without persistence."""
    with RedisServer(workdir / "redis") as server:
        yield server


def raise_fd_limit(wanted: int = 65536) -> int:
    """Raise this process's open-file limit (children inherit it); returns the new soft limit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return max(soft, target)


def spawn(args: Sequence[str], env: dict[str, str], logfile: Path) -> subprocess.Popen[bytes]:
    """Start a child process in the repository root, its output in logfile (or in a file of
    that name in BENCH_LOG_DIR, when that is set, to keep it)."""
    kept = os.environ.get("BENCH_LOG_DIR")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        logfile = Path(kept) / logfile.name
    with logfile.open("ab") as out:
        return subprocess.Popen(
            list(args), cwd=ROOT, env={**os.environ, **env}, stdout=out, stderr=out
        )


def stop(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL if it does not exit within 10 s; waits for it either way."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_until(check: Callable[[], bool], what: str, timeout: float = START_TIMEOUT_S) -> None:
    """Poll check() until it is true; TimeoutError after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not ready within {timeout:.0f} s")
        time.sleep(0.05)  # polling a condition with a deadline


def rss_kib(pid: int) -> int:
    """A process's resident memory (VmRSS) in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (user + system, its threads included), in seconds."""
    return _cpu(_stat(Path(f"/proc/{pid}/stat")))


def tree_cpu_seconds(pid: int) -> float:
    """cpu_seconds of a process and of its live children (uvicorn's supervisor and its workers)."""
    total = cpu_seconds(pid)
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = _stat(path)
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == pid:  # its parent
            total += _cpu(fields)
    return total


def _stat(path: Path) -> list[str]:
    """The fields of /proc/<pid>/stat after the command's name, from the state on."""
    return path.read_text().rsplit(")", 1)[1].split()


def _cpu(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_users(path: Path, accounts: int) -> list[str]:
    """An accounts file with numbered accounts, one plain key each; returns the keys."""
    keys = [f"bench-key-{i:05d}" for i in range(accounts)]
    entries = [
        {"user_id": f"00000000-0000-0000-0000-{i:012d}", "api_keys": [key]}
        for i, key in enumerate(keys)
    ]
    path.write_text(json.dumps({"accounts": entries}))
    return keys
