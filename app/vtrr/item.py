"""An item of a fair queue, its lease, and what drop() hands back: the queue's values, and the
enqueue's arguments built from them (a partition's share, each item's id and weight)."""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from app.vtrr.pool import pool_name
from app.vtrr.slots import check_size, check_span
from app.vtrr.wire import check_weight, micros

Shares = Mapping[str, float] | Callable[[str], float]


@dataclass(frozen=True)
class Dropped:
    """What drop() deleted: the ids that were queued and those that were in flight."""

    queued: list[str]
    in_flight: list[str]


@dataclass(frozen=True)
class Item:
    """One unit of work to enqueue: an opaque payload, an optional id and a weight; the kinds
    of consumer that may take it (None: any; pool.py); and the price of its weight: its
    partition is charged weight x price / share (a credit's used weight is in those units;
    per-partition limits count the plain weight). `size` is the cards (slots) it takes at once
    on one host of a fleet, and `span` the seconds it may run at most once started, which
    reservations and backfill go by (None: unknown; docs/vtrr.md, "Items of several cards")."""

    payload: str
    id: str | None = None
    weight: int = 1
    kinds: tuple[str, ...] | None = None
    price: float = 1.0
    size: int = 1
    span: float | None = None


@dataclass(frozen=True)
class Lease:
    """A dequeued item, held until acked, released, or its lease expires and is reclaimed."""

    task_id: str
    token: str
    payload: str
    timeouts: int
    expires_at: float


def share_of(shares: Shares | None, partition_key: str) -> float:
    """A partition's share of service (default 1); a ValueError unless positive and finite."""
    if shares is None:
        share: object = 1.0
    elif callable(shares):
        share = shares(partition_key)
    else:
        share = shares.get(partition_key, 1.0)
    if isinstance(share, bool) or not isinstance(share, int | float) or not math.isfinite(share):
        raise ValueError(f"share of {partition_key!r} must be a finite number, got {share!r}")
    if share <= 0:
        raise ValueError(f"share of {partition_key!r} must be positive, got {share!r}")
    return float(share)


def check_price(price: object) -> float:
    """An item's price, or a ValueError unless it is a positive, finite number."""
    if isinstance(price, bool) or not isinstance(price, int | float) or not math.isfinite(price):
        raise ValueError(f"an item's price must be a finite number, got {price!r}")
    if price <= 0:
        raise ValueError(f"an item's price must be positive, got {price!r}")
    return float(price)


def kinds_in(items: Iterable[Item]) -> list[str]:
    """The kinds that the items name, each once, in the order first named (their consumers'
    triggers are topped up in that order: the first kind of an item is its first choice)."""
    return list(dict.fromkeys(kind for item in items for kind in item.kinds or ()))


def enqueue_args(
    partition_key: str, shares: Shares | None, items: Iterable[Item]
) -> tuple[list[str], list[str]]:
    """The ids of items (generated where missing) and the per-item ARGV of enqueue.lua."""
    if not isinstance(partition_key, str) or not partition_key:
        raise ValueError(f"partition_key must be a non-empty string, got {partition_key!r}")
    share = share_of(shares, partition_key)
    ids: list[str] = []
    args: list[str] = []
    for item in items:
        task_id = secrets.token_hex(16) if item.id is None else item.id
        if not isinstance(task_id, str) or not task_id:
            raise ValueError(f"task id must be a non-empty string, got {task_id!r}")
        weight, price = check_weight(item.weight), check_price(item.price)
        priced = "" if price == 1.0 else repr(price)
        cost = repr(weight * price / share)
        size, span = check_size(item.size), check_span(item.span)
        args += [task_id, cost, str(weight), item.payload, pool_name(item.kinds), priced]
        args += ["" if size == 1 else str(size), "" if span is None else str(micros(span))]
        ids.append(task_id)
    return ids, args
