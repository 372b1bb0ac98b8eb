"""Per-partition limits: how much of a queue's consumers one partition may hold at once.

    most_in_flight    its items leased and not yet acked, at most this many at once
    most_held         the weight still ahead of its items in flight (each one's weight less
                      what it has used since its lease began, at `weight_per_second`) plus the
                      next one's, at most this much: a partition may fill idle consumers with
                      light items but cannot hold them all with heavy ones, and its next item
                      may start as soon as its running ones have run down far enough

Both are checked in the same call as the lease, so two consumers never both start the item
that passes a limit. A limited partition's items wait in a park of their own but for its next
one, which is in the queue exactly while the limits let it start (lua/lib/parking.lua), so a dequeue
never walks past held-back items, triggers count only items that may start, and a partition
without limits costs what it did before limits existed. When room frees only with time, the
queue says when (`Woken.next_at`): whoever serves it calls `wake()` then (a reclaim, and a
dequeue that finds nothing to start, wake too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.vtrr.wire import as_text

#: Most partitions one wake() call lets start (it is called again while some are due).
WAKE_BATCH = 100


@dataclass(frozen=True)
class Limits:
    """A partition's limits; None: no such limit. weight_per_second: how fast an item in flight
    uses its weight up (1 where weights are seconds; 0: never, so the held weight is the sum
    of the weights in flight)."""

    most_in_flight: int | None = None
    most_held: float | None = None
    weight_per_second: float = 1.0

    def __post_init__(self) -> None:
        n = self.most_in_flight
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"most_in_flight must be an integer of at least 1, got {n!r}")
        for name in ("most_held", "weight_per_second"):
            value = getattr(self, name)
            if value is None and name == "most_held":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0 or (name == "most_held" and value == 0):
                raise ValueError(f"{name} must be finite and positive, got {value!r}")

    @property
    def none(self) -> bool:
        """Whether neither limit is set."""
        return self.most_in_flight is None and self.most_held is None

    def fields(self) -> tuple[str, str, str]:
        """The three fields the limits hash keeps, in order ("-1" for a limit not set)."""
        return (
            "-1" if self.most_in_flight is None else str(self.most_in_flight),
            "-1" if self.most_held is None else repr(float(self.most_held)),
            repr(float(self.weight_per_second)),
        )

    def args(self) -> list[str | int]:
        """limit.lua's ARGV[2..4]: the fields, which it stores joined by spaces (to_text); with
        neither limit set, the call clears them."""
        return [*self.fields()]

    def to_text(self) -> str:
        """The limits as the limits hash keeps them: "<n> <held> <rate>", -1 for none (the
        text limit.lua writes from args(), and lua/lib/limits.lua's limits_of reads)."""
        return " ".join(self.fields())

    @classmethod
    def read(cls, raw: Any) -> Limits:
        """The limits that to_text() wrote (bytes or str), or Limits() for none (None)."""
        if raw is None:
            return cls()
        n, held, rate = as_text(raw).split()
        return cls(
            None if int(n) < 0 else int(n),
            None if float(held) < 0 else float(held),
            float(rate),
        )


def limits_of(raw: Any) -> Limits:
    """The limits as the limits hash keeps them (Limits.read: the name callers import)."""
    return Limits.read(raw)


def check_half_life(seconds: float | None) -> float | None:
    """A usage half-life: None (no memory), or a finite number of seconds above 0."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"usage_half_life_s must be a number, got {seconds!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"usage_half_life_s must be finite and positive, got {seconds!r}")
    return float(seconds)


@dataclass(frozen=True)
class Woken:
    """What a wake() did: partitions let start their next item, when the next wait ends (Redis
    TIME, seconds) or None when no partition waits for time, and Redis's time at the wake."""

    woken: int
    next_at: float | None
    now: float = 0.0

    @property
    def next_in(self) -> float | None:
        """Seconds from the wake to the next wait's end (None: no wait)."""
        return None if self.next_at is None else max(0.0, self.next_at - self.now)


@dataclass(frozen=True)
class Hold:
    """A partition held back by its limits in a queue, and when it should have room (Redis
    TIME, seconds) as far as its items in flight tell: the end of its wait for time, else the
    soonest end of one of them as its weight says; None when neither tells."""

    until: float | None


def hold_of(raw_limits: Any, rep: Any, wait_us: Any, live: Sequence[Any]) -> Hold | None:
    """The hold that a partition's limits, its one member in the queue (if any), its wait and
    its items in flight ("<start us> <weight>") amount to; None when it is not held back."""
    if raw_limits is None or rep:
        return None
    if wait_us is not None:
        return Hold(float(wait_us) / 1_000_000)
    rate = Limits.read(raw_limits).weight_per_second
    ends = [
        int(start) / 1_000_000 + float(weight) / rate
        for start, weight in (as_text(v).split() for v in live)
        if rate > 0
    ]
    return Hold(min(ends) if ends else None)
