"""What the fair queue's Python and its Lua both spell, spelled once: here.

The Lua gets each value as a local of its own (`lua()`, put before the library of lua/lib/ when
the function library or a script is built), so that it stays a constant there: a library's
locals are set once when it loads, and nothing is computed per call. tests/vtrr/test_layout.py
runs that text on Redis against these values, and finds no raw copy of them left in lua/.

A queue member is "<mark><COUNTER_DIGITS-digit counter><SEPARATOR><task id>". Equal scores sort
by member, so items of equal virtual time leave in arrival order (FAIR_MARK and the arrival
counter); FRONT_MARK sorts first and marks items put at the front, whose counter runs down from
FRONT_BASE so that the latest one put there leaves first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from enum import StrEnum
from typing import Final, Literal


class Field(StrEnum):
    """The fields of an item's hash (lua/lib/keys.lua says what each holds): one letter each, as
    there is one hash per item queued or in flight."""

    PARTITION = "p"
    COST = "c"
    WEIGHT = "w"
    PAYLOAD = "d"
    MEMBER = "m"
    ENTRY = "x"
    LEASE = "l"
    TIMEOUTS = "t"
    CREDITED = "k"
    LIMITED = "q"
    HALF_LIFE = "h"
    POOL = "o"
    PRICE = "r"
    SIZE = "z"
    SPAN = "s"
    HELD = "g"
    RESV = "v"


class Stat(StrEnum):
    """The counters the scripts keep in a queue's stats hash; `dequeued` and `acked` follow
    from them (wire.stats_of)."""

    ENQUEUED = "enqueued"
    RECLAIMED = "reclaimed"
    CANCELLED = "cancelled"
    RELEASED = "released"
    PROMOTED = "promoted"
    CREDITED = "credited"
    DROPPED_QUEUED = "dropped_queued"
    DROPPED_IN_FLIGHT = "dropped_in_flight"


FAIR_MARK: Final = "1"
FRONT_MARK: Final = "0"
COUNTER_DIGITS: Final = 15
SEPARATOR: Final = ":"
#: The characters before the task id in a queue member.
MEMBER_PREFIX: Final = len(FAIR_MARK) + COUNTER_DIGITS + len(SEPARATOR)
FRONT_BASE: Final = 10**COUNTER_DIGITS - 1
#: A pool's name is its kinds, sorted, joined by POOL_JOIN (which no kind holds: pool.py); a
#: kind's own keys are the queue's `kind` prefix, the kind, and one of these suffixes.
POOL_JOIN: Final = ","
KIND_CLOCK: Final = ":vt"
KIND_POOLS: Final = ":pools"
KIND_TRIGGERS: Final = ":triggers"

#: enqueue.lua's arguments per item (item.enqueue_args builds them).
ITEM_ARGS: Final = 8
#: What a card of a fleet is doing for the item that holds it (lua/lib/cards.lua): running it
#: (its own consumer's, one card), leading it (its consumer runs an item of several cards), or
#: lent to one.
CARD_RUN: Final = "run"
CARD_LEAD: Final = "lead"
CARD_LENT: Final = "lent"
#: A reservation's cards are joined by CARDS_JOIN, which no card's name holds (slots.py).
CARDS_JOIN: Final = ","

#: Where an item goes (enqueue's and a reclaim's ARGV): after its partition's, or at the front;
#: a reclaim may also put it at the front of its own partition, as put_back does.
FAIR: Final = "fair"
FRONT: Final = "front"
PARTITION_FRONT: Final = "partition_front"
#: Where a reclaimed item goes (docs/vtrr.md, "Leases"): charged again as if freshly enqueued,
#: to the front of the whole queue (as release), or to the front of its own partition (as
#: put_back).
Placement = Literal["fair", "front", "partition_front"]
#: Which end dequeue takes from: the fair order's head, or its rear (RedisQueue.get_last).
FIRST: Final = "first"
LAST: Final = "last"
#: What triggers.lua is asked to do (CeleryQueue's trigger bookkeeping).
TRIGGERS_SYNC: Final = "sync"
TRIGGERS_TOPUP: Final = "topup"
TRIGGERS_UNSEND: Final = "unsend"
#: The codes of the scripts' error replies, "<code> <detail>" (errors.from_reply).
DUPLICATE: Final = "DUPLICATE"
FULL: Final = "FULL"
OVERLIMIT: Final = "OVERLIMIT"
#: Where a stored trigger message has each trigger's own id (task id, correlation id, delivery
#: tag); the scripts put a fresh id there. Letters only: it is a Lua pattern there.
TRIGGER_ID: Final = "VTRRTRIGGERID"

#: What a constant may be in Lua: a string, a number, a list (a table), or a set (a table of
#: its members to true).
LuaValue = str | int | float | Sequence[str] | Sequence[float] | Set[str]


def index_entry(partition: str, member: str) -> str:
    """An item's entry in its queue's index of items by partition (lua/lib/partitions.lua
    items_prefix): the partition's length in bytes first, so that no partition's prefix is
    another's."""
    return f"{len(partition.encode())}{SEPARATOR}{partition}{SEPARATOR}{member}"


def constants() -> dict[str, LuaValue]:
    """The Lua name and value of each constant the fair queue's Lua reads."""
    return {
        **{f"F_{field.name}": field.value for field in Field},
        **{f"STAT_{stat.name}": stat.value for stat in Stat},
        "FAIR_MARK": FAIR_MARK,
        "FRONT_MARK": FRONT_MARK,
        # ZRANGEBYLEX's bound just past a partition's fairly placed entries
        "AFTER_FAIR_MARK": chr(ord(FAIR_MARK) + 1),
        "COUNTER_FORMAT": f"%0{COUNTER_DIGITS}d",
        "SEPARATOR": SEPARATOR,
        "TASK_ID_AT": MEMBER_PREFIX + 1,  # Lua's strings count from 1
        "FRONT_BASE": FRONT_BASE,
        "FAIR": FAIR,
        "FRONT": FRONT,
        "PARTITION_FRONT": PARTITION_FRONT,
        "LAST": LAST,
        "TRIGGERS_SYNC": TRIGGERS_SYNC,
        "TRIGGERS_UNSEND": TRIGGERS_UNSEND,
        "DUPLICATE": DUPLICATE,
        "FULL": FULL,
        "OVERLIMIT": OVERLIMIT,
        "TRIGGER_ID": TRIGGER_ID,
        "POOL_KIND": f"[^{POOL_JOIN}]+",  # a Lua pattern: one kind of a pool's name
        "KIND_CLOCK": KIND_CLOCK,
        "KIND_POOLS": KIND_POOLS,
        "KIND_TRIGGERS": KIND_TRIGGERS,
        "ITEM_ARGS": ITEM_ARGS,
        "CARD_RUN": CARD_RUN,
        "CARD_LEAD": CARD_LEAD,
        "CARD_LENT": CARD_LENT,
        "CARDS_JOIN": CARDS_JOIN,
        "CARD_IN_LIST": f"[^{CARDS_JOIN}]+",  # a Lua pattern: one card of a reservation's list
    }


def lua() -> str:
    """The constants as Lua locals, for the head of the Lua library (lua/lib/)."""
    return lua_locals(constants())


def lua_locals(values: Mapping[str, LuaValue]) -> str:
    """One `local NAME = value` line per constant (also the job store's: app/store)."""
    return "\n".join(f"local {name} = {lua_literal(value)}" for name, value in values.items())


def lua_literal(value: LuaValue) -> str:
    """A value as Lua source: a string quoted, a finite number as Python prints it (which Lua
    reads back exactly), a sequence as a table constructor, a set as a table of its members
    to true."""
    if isinstance(value, str):
        if any(c in value for c in "\\'\n\r\0"):
            raise ValueError(f"a constant must be plain text, got {value!r}")
        return f"'{value}'"
    if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        raise ValueError(f"no Lua literal for {value!r}")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Set):
        return "{" + ", ".join(f"[{lua_literal(item)}] = true" for item in sorted(value)) + "}"
    return "{" + ", ".join(lua_literal(item) for item in value) + "}"
