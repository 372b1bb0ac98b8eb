"""The machine the benchmarks run on: where the repository is, one line about the machine,
progress lines, and what a process has used (CPU, memory, open files)."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def machine() -> str:
    """The machine in one line: cores and load average."""
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} CPU cores, load average {one:.2f} (1 min), {five:.2f} (5 min)"


def log(line: str) -> None:
    """Progress, on stderr, so that stdout holds only the report."""
    print(line, file=sys.stderr, flush=True)


def raise_fd_limit(wanted: int = 65536) -> int:
    """Raise this process's open-file limit (children inherit it); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return max(soft, target)


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
