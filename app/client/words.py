"""The words the client commands use for numbers and times: durations, clock times, places in
line, sizes, amounts of money, and text from a job made safe for a terminal. Plain strings;
render.py builds the tables and lines out of them."""

from __future__ import annotations

import signal
import time
from decimal import ROUND_HALF_UP, Decimal

from app.models import ScriptEnvironment

MICROS = 1_000_000  # micro-units of money in one unit, as bills count them


def span(seconds: float) -> str:
    """A duration for people: "0.3 s", "4 s", "42 s", "3 min 5 s", "2 h 10 min"."""
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def clock(at: float, now: float | None = None) -> str:
    """A Unix time as local clock time, with the date when it is not today."""
    today = time.localtime(time.time() if now is None else now)
    moment = time.localtime(at)
    if moment[:3] == today[:3]:
        return time.strftime("%H:%M:%S", moment)
    return time.strftime("%Y-%m-%d %H:%M:%S", moment)


def eta(estimated_start_at: float, now: float) -> str:
    """When a queued job should start: "starts in ~42 s (at 14:03:12)"."""
    ahead = estimated_start_at - now
    if ahead < 1:
        return "starts any moment"
    return f"starts in ~{span(round(ahead))} (at {clock(estimated_start_at, now)})"


def place(position: int) -> str:
    """A 0-based queue position for people."""
    if position == 0:
        return "next in line"
    return f"{position} job{'s' if position > 1 else ''} ahead"


def clean(text: str) -> str:
    """Text from a job with its control characters (an escape sequence, a carriage return)
    shown as U+FFFD: a job's output must not drive the terminal of whoever reads it."""
    return "".join("\ufffd" if _control(char) else char for char in text)


def _control(char: str) -> bool:
    code = ord(char)
    return char != "\t" and (code < 0x20 or 0x7F <= code < 0xA0)


def size(count: int) -> str:
    """A number of bytes for people: "512 B", "3.2 MiB", "1.5 GiB"."""
    amount, unit = float(count), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if amount < 1024:
            break
        amount, unit = amount / 1024, bigger
    return f"{count} B" if unit == "B" else f"{amount:.1f} {unit}"


def money(micros: int) -> str:
    """An amount for people, from its exact micro-units: at least 2 decimals, at most 4."""
    shown = (Decimal(micros) / MICROS).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)
    whole, fraction = f"{shown:f}".split(".")
    return f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"


def moment(at: float, now: float) -> str:
    """A Unix time in at most 11 characters: "14:03:12" today, "12-02 14:03" this year,
    "2025-12-02" before."""
    then, today = time.localtime(at), time.localtime(now)
    if then[:3] == today[:3]:
        return time.strftime("%H:%M:%S", then)
    if then.tm_year == today.tm_year:
        return time.strftime("%m-%d %H:%M", then)
    return time.strftime("%Y-%m-%d", then)


def exit_code_words(code: int) -> str:
    """A script's exit code for people: "3", or "-9 (killed by SIGKILL)"."""
    if code >= 0:
        return str(code)
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"{code} (killed by {name})"


def environment_words(environment: ScriptEnvironment) -> str:
    """How the script's environment was had: "cached", or "built in 12 s"."""
    if environment.cached:
        return "cached"
    return f"built in {span(environment.seconds)}"
