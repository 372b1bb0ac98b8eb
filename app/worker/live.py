"""What a running job says while it runs, as the worker hears it: log lines (ctx.log, and the
job's stdout and stderr) and progress, handed to a JobEvents as they come, and the facts it
notes of its run (ctx.note), kept for its end.

Both executors (the warm child, InlineExecutor) call a JobEvents; the runner's writes them to
Redis (app/worker/reports.py). JobWatch is how the warm child's parent gathers them. This module
is imported by the child process too: keep it light.
"""

from __future__ import annotations

import os
import re
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, Literal, NamedTuple, Protocol

Stream = Literal["stdout", "stderr", "log"]

MAX_LINE_BYTES = 4096  # a longer line is cut: a log is for reading, files are artifacts
READ_CHUNK = 1 << 20  # the most read from each output file in one poll
RECENT_LINES = 20  # output lines kept to quote when the job's process dies
LOG_KEEP_BYTES = 1 << 20  # a child's output file is emptied before a job once past this
_BREAK = re.compile(rb"\r\n|\r|\n")  # \r too: a progress bar's redraws are lines of their own
_TEXT_BREAK = re.compile(r"\r\n|\r|\n")


class LogLine(NamedTuple):
    """One line of a job's log: when (Unix seconds), from where, and its text (no newline)."""

    at: float
    stream: Stream
    text: str


class JobEvents(Protocol):
    """Told what a running job says. An executor calls began() when the job began later than
    its run's start said (it waited for a fresh child, or its type's setup() ran first),
    lines() once per poll, with the lines since the last call (possibly none, so that a
    throttled receiver can send what it held back), and progress() with the job's latest
    progress."""

    def began(self) -> None:
        """The job has begun, later than its run's start said: its run starts now."""
        ...

    def lines(self, batch: list[LogLine]) -> None:
        """New lines, in order within each stream."""
        ...

    def progress(self, fraction: float, message: str) -> None:
        """The job's latest progress."""
        ...


class NoEvents:
    """A JobEvents that ignores everything (a run nobody follows)."""

    def began(self) -> None:
        """Ignored."""

    def lines(self, batch: list[LogLine]) -> None:
        """Ignored."""

    def progress(self, fraction: float, message: str) -> None:
        """Ignored."""


NO_EVENTS = NoEvents()


def clip(text: str) -> str:
    """The text, cut to MAX_LINE_BYTES of UTF-8 (never in the middle of a character)."""
    raw = text.encode("utf-8", errors="replace")
    if len(raw) <= MAX_LINE_BYTES:
        return text
    return raw[:MAX_LINE_BYTES].decode("utf-8", errors="ignore")


def lines_of(stream: Stream, text: str, at: float) -> list[LogLine]:
    """ctx.log's text as lines: one per line of it (a final line break ends the last one)."""
    pieces = _TEXT_BREAK.split(text)
    if len(pieces) > 1 and pieces[-1] == "":
        pieces.pop()
    return [LogLine(at, stream, clip(piece)) for piece in pieces]


class _FileTail:
    """The lines appended to one output file since an offset."""

    def __init__(self, stream: Stream, path: Path, offset: int) -> None:
        self.stream = stream
        self._file: BinaryIO | None = None
        try:
            self._file = path.open("rb")
            self._file.seek(offset)
        except OSError:
            pass  # no file, no output (a child that died before it opened its files)
        self._partial = b""  # after the last line break: a line not yet ended
        self._skipping = False  # within the rest of a line that was cut

    def read(self) -> list[bytes] | None:
        """The lines ended in the next chunk of the file; None at its end for now."""
        data = self._file.read(READ_CHUNK) if self._file is not None else b""
        if not data:
            return None
        data = self._partial + data
        held = b"\r" if data.endswith(b"\r") else b""  # may be the first half of \r\n
        pieces = _BREAK.split(data[: len(data) - len(held)])
        rest = pieces.pop() + held
        if self._skipping and pieces:
            pieces.pop(0)  # the end of the line that was cut
            self._skipping = False
        if self._skipping:
            rest = held
        elif len(rest) > MAX_LINE_BYTES:
            pieces.append(rest)  # cut now: a line with no end must not fill the memory
            rest, self._skipping = b"", True
        self._partial = rest
        return pieces

    def last(self) -> list[bytes]:
        """The unended line at the end of the file, once no more will come."""
        rest, self._partial = self._partial.rstrip(b"\r"), b""
        return [rest] if rest and not self._skipping else []

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class OutputTail:
    """The job's stdout and stderr files (the child's fds 1 and 2), read as lines from where
    the job began; `recent` keeps the last lines of both, to quote when the process dies."""

    def __init__(self, files: Sequence[tuple[Stream, Path, int]]) -> None:
        self._tails = [_FileTail(stream, path, offset) for stream, path, offset in files]
        self.recent: deque[str] = deque(maxlen=RECENT_LINES)

    def read(self, at: float) -> list[LogLine]:
        """The lines ended since the last read, at most one chunk of each file."""
        lines: list[LogLine] = []
        for tail in self._tails:
            lines += self._lines(tail.stream, tail.read() or [], at)
        return lines

    def drain(self, at: float) -> Iterator[list[LogLine]]:
        """Every line left, in batches of a chunk, then the unended last lines: once the
        process has stopped writing."""
        for tail in self._tails:
            while (pieces := tail.read()) is not None:
                yield self._lines(tail.stream, pieces, at)
            yield self._lines(tail.stream, tail.last(), at)

    def close(self) -> None:
        """Close the files."""
        for tail in self._tails:
            tail.close()

    def _lines(self, stream: Stream, pieces: list[bytes], at: float) -> list[LogLine]:
        lines = [LogLine(at, stream, clip(p.decode("utf-8", errors="replace"))) for p in pieces]
        self.recent.extend(line.text for line in lines)
        return lines


def tails_from_here(outputs: Mapping[Stream, Path]) -> OutputTail:
    """The child's output files, read from where the next job's output starts in them; a file
    grown past LOG_KEEP_BYTES is emptied first (the child writes in append mode, so it carries
    on at the new end)."""
    files: list[tuple[Stream, Path, int]] = []
    for stream, path in outputs.items():
        size = path.stat().st_size if path.exists() else 0
        if size > LOG_KEEP_BYTES:
            os.truncate(path, 0)
            size = 0
        files.append((stream, path, size))
    return OutputTail(files)


def last_words(outputs: Mapping[Stream, Path]) -> str:
    """The last lines written to the output files from their start (a child that died at its
    start), to quote."""
    tail = OutputTail([(stream, path, 0) for stream, path in outputs.items()])
    for _ in tail.drain(time.time()):
        pass  # only the last lines are kept, to quote
    tail.close()
    return "\n".join(tail.recent)


class JobWatch:
    """What one job says, as the parent gathers it: ctx.log lines and the latest progress from
    the pipe, and the lines of the child's stdout and stderr; flushed to the JobEvents once per
    poll."""

    def __init__(
        self, task_id: str, events: JobEvents, tail: OutputTail, *, late: bool = False
    ) -> None:
        self._task_id, self._events, self._tail = task_id, events, tail
        #: whether the job waited for its child's start: it begins later than its lease
        self.late = late
        self._lines: list[LogLine] = []
        self._progress: tuple[float, str] | None = None
        self._finished = False
        #: when the child said the job began (its type set up): the job's clock starts there
        self.began_at: float | None = None
        #: what the job has noted of its run so far (ctx.note), one JSON object: the end of a
        #: run killed before its reply still has it
        self.facts: str | None = None

    @property
    def recent(self) -> list[str]:
        """The last lines of the job's stdout and stderr."""
        return list(self._tail.recent)

    def seconds(self) -> float:
        """The job's time so far: none while its type was being set up."""
        return 0.0 if self.began_at is None else time.monotonic() - self.began_at

    def take(self, message: object) -> None:
        """A message of the job's (one of another job's lingering threads is dropped)."""
        match message:
            case ("began", self._task_id, bool(set_up)):
                self.began_at = time.monotonic()
                if set_up or self.late:
                    self._events.began()  # the job began later than its run's lease said
            case ("log", self._task_id, float(at), str(text)):
                self._lines += lines_of("log", text, at)
            case ("progress", self._task_id, float(fraction), str(text)):
                self._progress = (fraction, text)
            case ("note", self._task_id, str(text)):
                self.facts = text

    def flush(self) -> None:
        """Hand the lines so far (none is news too) and the latest progress to the events."""
        lines, self._lines = [*self._lines, *self._tail.read(time.time())], []
        self._events.lines(lines)
        if self._progress is not None:
            self._events.progress(*self._progress)
            self._progress = None

    def finish(self) -> None:
        """Flush, then every line left in the output files; once the job is done writing."""
        if self._finished:
            return
        self._finished = True
        self.flush()
        for batch in self._tail.drain(time.time()):
            if batch:
                self._events.lines(batch)

    def close(self) -> None:
        """Close the output files."""
        self._tail.close()
