"""A script's stdout and stderr, read line by line into the job's log and progress.

A stdout line `fairgpu:progress <fraction> <words>` (a fraction in [0, 1]) is the job's
progress, not a log line; any other line, a malformed progress line among them, is logged. A line
is cut at MAX_LINE_BYTES (the rest of it is counted, not kept), and of a line that a progress
bar redraws with carriage returns only its last state is kept, as a terminal shows it.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable
from typing import IO

#: The longest line kept, in bytes: a log line is read by people.
MAX_LINE_BYTES = 8192
#: Lines held at most before they are passed on, whenever the next flush is due.
MAX_BATCH_LINES = 1000
PROGRESS = re.compile(r"fairgpu:progress[ \t]+(\S+)(?:[ \t]+(.*))?")


def parse_progress(line: str) -> tuple[float, str] | None:
    """The fraction and words of a progress line, or None when the line is not one."""
    found = PROGRESS.fullmatch(line.strip())
    if found is None:
        return None
    try:
        fraction = float(found.group(1))
    except ValueError:
        return None
    if not math.isfinite(fraction) or not 0.0 <= fraction <= 1.0:
        return None
    return fraction, (found.group(2) or "").strip()


def pump(source: IO[bytes], emit: Callable[[str], None]) -> None:
    """Call `emit` with each line read from `source` until its end, each cut to MAX_LINE_BYTES
    and decoded (bytes that are not UTF-8 replaced)."""
    while chunk := source.readline(MAX_LINE_BYTES):
        cut = 0
        if not chunk.endswith(b"\n") and len(chunk) >= MAX_LINE_BYTES:
            while rest := source.readline(MAX_LINE_BYTES):  # the rest of an overlong line
                cut += len(rest)
                if rest.endswith(b"\n"):
                    break
        text = chunk.decode(errors="replace").rstrip("\r\n")
        text = text.rsplit("\r", 1)[-1]  # a redrawn progress bar: its last state
        emit(f"{text} [{cut} more bytes of this line cut]" if cut else text)


class Streams:
    """Two threads that read a process's stdout and stderr, and what they read, held until the
    next `flush` (or until MAX_BATCH_LINES are held): a line per message to the worker would
    slow a chatty script tenfold. Only the latest progress of each batch is passed on."""

    def __init__(
        self,
        stdout: IO[bytes],
        stderr: IO[bytes],
        log: Callable[[str], None],
        progress: Callable[[float, str], None],
    ) -> None:
        self._log, self._progress = log, progress
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._latest: tuple[float, str] | None = None
        self._threads = [
            threading.Thread(target=pump, args=(stdout, self._out), name="script-stdout"),
            threading.Thread(target=pump, args=(stderr, self._held), name="script-stderr"),
        ]
        for thread in self._threads:
            thread.daemon = True  # a pipe held open by a leftover process never holds the child
            thread.start()

    def _out(self, line: str) -> None:
        said = parse_progress(line)
        if said is None:
            self._held(line)
        else:
            with self._lock:
                self._latest = said

    def _held(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)
            full = len(self._lines) >= MAX_BATCH_LINES
        if full:
            self.flush()

    def flush(self) -> None:
        """Pass on the lines held, in one message, and the latest progress."""
        with self._lock:
            lines, self._lines = self._lines, []
            latest, self._latest = self._latest, None
        if lines:
            self._log("\n".join(lines))
        if latest is not None:
            self._progress(*latest)

    def join(self, timeout_s: float) -> bool:
        """Wait for both streams' ends, `timeout_s` in all, then flush; whether both ended."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        self.flush()
        return not any(thread.is_alive() for thread in self._threads)
