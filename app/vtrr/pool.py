"""Kinds of consumer and the pools of items they may take (docs/vtrr.md, "Kinds").

A consumer may have a kind (in fairgpu, its class of card) and an item may name the kinds that
may take it; the items that name the same set of kinds make one pool, which waits in a line of
its own. A kind is 1 to 64 of a-z, A-Z, 0-9, '.', '_' and '-': no POOL_JOIN, which joins a
pool's kinds in its name, and nothing that a Lua pattern or a key would trip on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from app.vtrr.layout import POOL_JOIN

_KIND = re.compile(r"[A-Za-z0-9._-]{1,64}")


def check_kind(kind: object) -> str:
    """A kind as given, or a ValueError saying what one may be."""
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise ValueError(f"a kind is 1 to 64 of a-z, A-Z, 0-9, '.', '_', '-', got {kind!r}")
    return kind


def pool_name(kinds: Iterable[str] | None) -> str:
    """The pool of an item that these kinds may take: their sorted, distinct names joined; ""
    for an item that any consumer may take (None). An empty set is a ValueError: no consumer
    could ever take such an item."""
    if kinds is None:
        return ""
    if isinstance(kinds, str):
        raise ValueError(f"kinds must be a collection of kinds, not the string {kinds!r}")
    names = sorted({check_kind(kind) for kind in kinds})
    if not names:
        raise ValueError("an item's kinds must name at least one kind (None: any consumer)")
    return POOL_JOIN.join(names)
