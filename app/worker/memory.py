"""The resident memory of the process a job runs in, as the job child reports it after each
job (hygiene.py's limits) and with each reply (the job's peak)."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path


def peak_rss() -> int:
    """The process's peak resident memory so far, in bytes."""
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return rss_kib * (1 if sys.platform == "darwin" else 1024)


def current_rss() -> int | None:
    """The process's resident memory now, in bytes (Linux's /proc); None where unknown."""
    try:
        resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return resident_pages * os.sysconf("SC_PAGE_SIZE")
