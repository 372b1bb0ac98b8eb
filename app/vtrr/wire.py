"""What the fair queue's operations take and answer: the arguments checked before Redis is
touched, and the replies parsed alike for FairQueue and AsyncFairQueue."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.vtrr.layout import MEMBER_PREFIX, Stat

#: FairQueue.stats: the counters the scripts keep but drop's, and two that follow from them.
STAT_NAMES = (
    Stat.ENQUEUED.value,
    "dequeued",
    "acked",
    Stat.RECLAIMED.value,
    Stat.CANCELLED.value,
    Stat.RELEASED.value,
    Stat.PROMOTED.value,
    Stat.CREDITED.value,
)
#: The most queued items one credit moves: the work of a call stays bounded however many items
#: a partition has queued (see credit.lua and docs/vtrr.md).
CREDIT_MOVES = 256


@dataclass(frozen=True)
class Admitted:
    """What an enqueue with hook arguments did: the ids it queued (none when `admit` stopped
    it), the triggers to publish, and what the hook that ran last returned (None: nothing)."""

    ids: list[str]
    triggers: int
    reply: Any
    queued: bool


def hooked_args(hook_args: Sequence[str | int]) -> list[str | int]:
    """enqueue.lua's ARGV between its half-life and its items: m, then the m hook arguments."""
    return [len(hook_args), *hook_args]


def admitted_of(ids: list[str], reply: Any) -> Admitted:
    """enqueue.lua's reply to a call with hook arguments: {triggers, the hooks' reply, scores of
    the items queued}, or only the first two when `admit` stopped it."""
    queued = len(reply) > 2
    return Admitted(ids if queued else [], int(reply[0]), reply[1], queued)


def check_weight(weight: object) -> int:
    """A weight is a positive integer (not a bool); anything else is a ValueError."""
    if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
        raise ValueError(f"weight must be a positive integer, got {weight!r}")
    return weight


def rank_of(reply: Any) -> int | None:
    """position.lua's reply: a 0-based rank, or nil for an item not queued."""
    return None if reply is None else int(reply)


def ranks_of(reply: Any) -> list[int | None]:
    """positions.lua's reply: a rank per item, -1 for one not queued."""
    return [None if int(rank) < 0 else int(rank) for rank in reply]


def credit_args(task_id: str, token: str, used_weight: int) -> tuple[str, str, int, int]:
    """credit.lua's ARGV; used_weight is checked as weights are, before Redis is touched."""
    return task_id, token, check_weight(used_weight), CREDIT_MOVES


def credit_of(reply: Any) -> float:
    """credit.lua's reply: the virtual time credited, as a string so that no digit is lost."""
    return float(as_text(reply))


def stats_of(raw: Mapping[Any, Any], queued: int, in_flight: int) -> dict[str, int]:
    """Every counter of STAT_NAMES (0 when never counted), from the stats hash and the numbers
    of items queued and in flight. Each item enqueued is queued until it is dequeued, cancelled
    or dropped; each dequeued is in flight until it is acked, released, reclaimed or dropped;
    released and reclaimed items are queued again. So, however the operations interleave:
        dequeued = enqueued + released + reclaimed - cancelled - dropped_queued - queued
        acked    = dequeued - released - reclaimed - dropped_in_flight - in_flight
    """
    c = {as_text(k): int(v) for k, v in raw.items()}
    n = {stat: c.get(stat, 0) for stat in Stat}
    requeued = n[Stat.RELEASED] + n[Stat.RECLAIMED]
    dequeued = n[Stat.ENQUEUED] + requeued - n[Stat.CANCELLED] - n[Stat.DROPPED_QUEUED] - queued
    acked = dequeued - requeued - n[Stat.DROPPED_IN_FLIGHT] - in_flight
    counted = {"dequeued": dequeued, "acked": acked, **{str(s): v for s, v in n.items()}}
    return {name: counted[name] for name in STAT_NAMES}


def micros(seconds: float) -> int:
    """A lease's length in whole microseconds, as the scripts keep expiries (at least 1)."""
    return max(1, round(seconds * 1_000_000))


def seconds_of(micros_reply: bytes | str) -> float:
    """A lease expiry that a script replied, in microseconds, as seconds (Redis TIME)."""
    return int(as_text(micros_reply)) / 1_000_000


def task_id_of(member: bytes | str) -> str:
    """The task id in a queue member."""
    return as_text(member)[MEMBER_PREFIX:]


def as_text(value: bytes | str) -> str:
    """A Redis reply as str."""
    return value.decode() if isinstance(value, bytes) else value
