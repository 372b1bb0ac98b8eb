"""Workers' heartbeats as readers see them: who is alive, and which queues each one serves.

Each worker keeps an entry in `fairgpu:workers`: <name> -> {"queues": [...], "seen": <Redis
TIME>, "busy_until": <when its job should end, or null>, "broken": <why its device is unusable,
only when it is>} (written by app/worker/presence.py). Readers count a worker alive while its
entry is under ALIVE_BEATS heartbeats old and it is not broken, and forget entries a day old.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

import redis

from app.store.keys import WORKERS
from app.vtrr.wire import as_text

ALIVE_BEATS = 3
FORGET_S = 86400


@dataclass(frozen=True)
class Seen:
    """One worker's last heartbeat."""

    name: str
    queues: tuple[str, ...]
    seen: float
    busy_until: float | None = None
    broken: str | None = None


def parse(raw: Mapping[bytes | str, bytes | str]) -> list[Seen]:
    """The heartbeats in WORKERS's raw hash, skipping entries that are not ours."""
    seen = []
    for name, value in raw.items():
        try:
            seen.append(_entry(as_text(name), json.loads(value)))
        except (ValueError, KeyError, TypeError):
            continue
    return seen


def _entry(name: str, entry: object) -> Seen:
    """One heartbeat; ValueError unless it is an object with queues and finite times."""
    if not isinstance(entry, dict):
        raise ValueError("not a heartbeat")
    until = entry.get("busy_until")
    times = [float(entry["seen"]), *([] if until is None else [float(until)])]
    if not all(map(math.isfinite, times)):
        raise ValueError("not a time")
    broken = entry.get("broken")
    return Seen(
        name,
        tuple(map(str, entry["queues"])),
        times[0],
        None if until is None else times[1],
        None if broken is None else str(broken),
    )


def read(client: redis.Redis, now: float) -> list[Seen]:
    """Every worker heard from in the last day; older entries are deleted on the way."""
    workers = parse(client.hgetall(WORKERS))  # one field per worker: as many as GPUs
    stale = [w.name for w in workers if w.seen < now - FORGET_S]
    if stale:
        client.hdel(WORKERS, *stale)
    return [w for w in workers if w.seen >= now - FORGET_S]


def alive(workers: list[Seen], queue: str, now: float, heartbeat_s: float) -> list[Seen]:
    """The workers among these that serve `queue`, beat recently and can run jobs."""
    cutoff = now - ALIVE_BEATS * heartbeat_s
    return [w for w in workers if queue in w.queues and w.seen >= cutoff and w.broken is None]
