"""Items of several cards: a fleet's slots (its cards), their claims and reservations.

A consumer may stand for one card of a host (`Slot`), and an item may take several cards at once
(`Item(size=N)`), all on one host and of one kind. Such an item is never leased card by card: a
slotted consumer's `tick()` (lua/tick.lua), made every fraction of a second, takes all its
cards in one step, its own leading, once its host has them free; until then, once its turn has
come, it keeps a reservation on the host whose cards free first (by the spans of what holds
them), and those cards take only items that end before it starts. docs/vtrr.md, "Items of
several cards", says how, and what bounds an item's wait.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from app.vtrr.layout import CARD_LEAD, CARD_LENT, CARD_RUN, Field

#: The most cards one item may take.
MOST_CARDS = 64
_NAME = re.compile(r"[A-Za-z0-9._@-]{1,128}")
Role = Literal["run", "lead", "lent"]
_ROLES: dict[str, Role] = {CARD_RUN: "run", CARD_LEAD: "lead", CARD_LENT: "lent"}


def check_name(word: object) -> str:
    """A host's, card's or worker's name as given, or a ValueError saying what one may be."""
    if not isinstance(word, str) or not _NAME.fullmatch(word):
        raise ValueError(f"a host, card or worker is 1 to 128 of A-Z a-z 0-9 . _ @ -, got {word!r}")
    return word


def check_size(size: object) -> int:
    """An item's size (cards at once), or a ValueError unless 1 to MOST_CARDS."""
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MOST_CARDS:
        raise ValueError(f"an item's size is a whole number from 1 to {MOST_CARDS}, got {size!r}")
    return size


def check_span(span: object) -> float | None:
    """An item's span (seconds it may run once started), or None; a ValueError unless a
    positive, finite number."""
    if span is None:
        return None
    if isinstance(span, bool) or not isinstance(span, int | float) or not math.isfinite(span):
        raise ValueError(f"an item's span must be a finite number of seconds, got {span!r}")
    if span <= 0:
        raise ValueError(f"an item's span must be positive, got {span!r}")
    return float(span)


@dataclass(frozen=True)
class Slot:
    """A consumer's card: its host, the card's name there (unique on the host: lends are kept
    by host and card, whichever process drives it), and the name of the worker driving it."""

    host: str
    card: str
    worker: str

    def __post_init__(self) -> None:
        for word in (self.host, self.card, self.worker):
            check_name(word)
        if ":" in self.host or ":" in self.card:
            raise ValueError("a host or card name may not hold ':'")


@dataclass(frozen=True)
class Held:
    """What holds a consumer's card besides its own run: an item of several cards that it leads
    or to which it is lent (ready: it said its card is clean)."""

    role: Role
    task_id: str
    ready: bool


@dataclass(frozen=True)
class Placement:
    """The cards an item in flight holds: its host, the cards (its leader's first) and the
    workers driving them, in the same order."""

    host: str
    cards: tuple[str, ...]
    workers: tuple[str, ...]


@dataclass(frozen=True)
class Reservation:
    """The cards of one host kept for an item of several cards, from start_at (Unix seconds)."""

    host: str
    start_at: float
    cards: tuple[str, ...]


def card_of(key: str) -> tuple[str, str]:
    """A card key's host and card (lua/lib/cards.lua: `<fleet>card:<host>:<card>`)."""
    host, card = key.rsplit(":", 2)[-2:]
    return host, card


def held_of(raw: Any) -> Held | None:
    """A card's state as Redis keeps it, as a Held; None when free or running its own item."""
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    role, task_id, _ends, ready, _item = text.split(" ")
    if role == CARD_RUN:
        return None
    return Held(_ROLES[role], task_id, ready == "1")


def reservation_of(host: str, raw: Any) -> tuple[str, Reservation, str] | None:
    """A host's reservation as Redis keeps it: the item's id, the Reservation, and the key of
    the item's hash (it counts only while that item is queued: FleetCards.reservations)."""
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    task_id, start, _placed, cards, item = text.split(" ")
    return task_id, Reservation(host, int(start) / 1e6, tuple(cards.split(","))), item


#: The item's hash field that names the card keys it holds.
HELD_FIELD = Field.HELD.value
