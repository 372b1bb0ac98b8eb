"""Workers' heartbeats as readers see them: who is alive, and which queues each one serves.

Each worker keeps an entry in `fairgpu:workers`: <name> -> {"queues": [...], "seen": <Redis
TIME>, "busy_until": <when its job should end, or null>, "running": <the run in hand, or null:
{"job", "account", "kind", "since" (Redis TIME), "preemptible"}>, "broken": <why its device is
unusable, only when it is>, and, from a worker that knows its place in the fleet (issue 41),
"host", "gpu_class" (null without a catalog) and "memory_gb" (its class's, null without one),
and "lent_to" (the job of several cards its card is lent to, only while it is: issue 42)}:
one record, Seen (its run a Running), written by
app/worker/presence.py with Seen.encode() and read back with Seen.read() (parse, read). Readers
count a worker alive while its entry is under ALIVE_BEATS heartbeats old and it is not broken,
and forget entries a day old.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import redis

from app.store.keys import WORKERS
from app.vtrr.wire import as_text

ALIVE_BEATS = 3
FORGET_S = 86400


@dataclass(frozen=True)
class Running:
    """The run a worker has in hand: its job, the job's account and queue, when the run began
    (Redis's clock: stamped by the heartbeat that first says it, app/worker/presence.py) and
    whether it may be asked to yield (app/worker/preemption.py)."""

    job: str
    account: str
    kind: str
    since: float = 0.0
    preemptible: bool = False

    def encode(self) -> dict[str, object]:
        """As a heartbeat holds it: its fields by name."""
        return asdict(self)

    @classmethod
    def read(cls, raw: object) -> Running | None:
        """A run as encode() wrote it (None: none, or one this release cannot read); a run of
        a release before preemption has no `preemptible`."""
        if not isinstance(raw, dict):
            return None
        try:
            since = float(raw["since"])
            if not math.isfinite(since):
                return None
            job, account, kind = str(raw["job"]), str(raw["account"]), str(raw["kind"])
            return cls(job, account, kind, since, bool(raw.get("preemptible", False)))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Seen:
    """One worker's last heartbeat."""

    name: str
    queues: tuple[str, ...]
    seen: float
    busy_until: float | None = None
    broken: str | None = None
    running: Running | None = None
    host: str | None = None
    gpu_class: str | None = None
    memory_gb: float | None = None
    lent_to: str | None = None

    def encode(self) -> str:
        """The heartbeat as its worker writes it (its name is the hash's field): `broken` only
        when it is, its place only where it has one (a host)."""
        entry: dict[str, object] = {"queues": list(self.queues), "seen": self.seen}
        entry["busy_until"] = self.busy_until
        entry["running"] = None if self.running is None else self.running.encode()
        if self.broken is not None:
            entry["broken"] = self.broken
        if self.host is not None:
            entry |= {"host": self.host, "gpu_class": self.gpu_class, "memory_gb": self.memory_gb}
        if self.lent_to is not None:
            entry["lent_to"] = self.lent_to
        return json.dumps(entry)

    @classmethod
    def read(cls, name: str, raw: bytes | str) -> Seen:
        """A heartbeat as encode() wrote it; ValueError unless it is an object with queues and
        finite times."""
        entry = json.loads(raw)
        if not isinstance(entry, dict):
            raise ValueError("not a heartbeat")
        until = entry.get("busy_until")
        times = [float(entry["seen"]), *([] if until is None else [float(until)])]
        if not all(map(math.isfinite, times)):
            raise ValueError("not a time")
        broken, lent_to = entry.get("broken"), entry.get("lent_to")
        return cls(
            name,
            tuple(map(str, entry["queues"])),
            times[0],
            None if until is None else times[1],
            None if broken is None else str(broken),
            Running.read(entry.get("running")),
            *_place(entry),
            lent_to=lent_to if isinstance(lent_to, str) else None,
        )


def _place(entry: dict[str, object]) -> tuple[str | None, str | None, float | None]:
    """A heartbeat's host, class and memory, as far as they read: an entry of a release before
    the fleet has none, and a garbled one loses only what is garbled."""
    host, gpu_class, memory = entry.get("host"), entry.get("gpu_class"), entry.get("memory_gb")
    if isinstance(memory, bool) or not isinstance(memory, int | float) or not math.isfinite(memory):
        memory = None
    return (
        host if isinstance(host, str) else None,
        gpu_class if isinstance(gpu_class, str) else None,
        None if memory is None else float(memory),
    )


def parse(raw: Mapping[bytes | str, bytes | str]) -> list[Seen]:
    """The heartbeats in WORKERS's raw hash, skipping entries that are not ours."""
    seen = []
    for name, value in raw.items():
        try:
            seen.append(Seen.read(as_text(name), value))
        except (ValueError, KeyError, TypeError):
            continue
    return seen


def read(client: redis.Redis, now: float) -> list[Seen]:
    """Every worker heard from in the last day; older entries are deleted on the way."""
    workers = parse(client.hgetall(WORKERS))  # one field per worker: as many as GPUs
    stale = [w.name for w in workers if w.seen < now - FORGET_S]
    if stale:
        client.hdel(WORKERS, *stale)
    return [w for w in workers if w.seen >= now - FORGET_S]


def ready(workers: list[Seen], now: float, heartbeat_s: float) -> list[Seen]:
    """The workers among these that beat recently and can run jobs, whatever their queues."""
    cutoff = now - ALIVE_BEATS * heartbeat_s
    return [w for w in workers if w.seen >= cutoff and w.broken is None]


def alive(workers: list[Seen], queue: str, now: float, heartbeat_s: float) -> list[Seen]:
    """The workers among these that serve `queue`, beat recently and can run jobs."""
    cutoff = now - ALIVE_BEATS * heartbeat_s
    return [w for w in workers if queue in w.queues and w.seen >= cutoff and w.broken is None]
