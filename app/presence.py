"""Workers' heartbeats in Redis: who is alive, and which queues each one serves.

A worker writes `fairgpu:workers` <name> -> {"queues": [...], "seen": <Redis TIME>,
"busy_until": <when its job should end, or null>} every heartbeat_seconds from a daemon thread
and whenever it starts or ends a job, and deletes its entry when it stops. Readers count a
worker alive while its entry is under ALIVE_BEATS heartbeats old, and forget entries a day old.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import redis
from redis.exceptions import RedisError

from app.store import WORKERS
from app.vtrr.queue import as_text

log = logging.getLogger(__name__)
ALIVE_BEATS = 3
FORGET_S = 86400


@dataclass(frozen=True)
class Seen:
    """One worker's last heartbeat."""

    name: str
    queues: tuple[str, ...]
    seen: float
    busy_until: float | None = None


class Presence:
    """Keeps one worker's heartbeat fresh while it runs."""

    def __init__(self, client: redis.Redis, name: str, queues: list[str], every: float) -> None:
        self.client, self.name, self.queues, self.every = client, name, queues, every
        self._busy_until: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="presence", daemon=True)

    def beat(self) -> None:
        """Write the heartbeat now."""
        seconds, micros = self.client.time()
        entry = {"queues": self.queues, "seen": seconds + micros / 1e6}
        entry["busy_until"] = self._busy_until
        self.client.hset(WORKERS, self.name, json.dumps(entry))

    def busy(self, until: float | None) -> None:
        """Say that a job started and should end at `until` (Unix seconds), or, with None, that
        the worker is idle again; written at once, so estimates see it."""
        self._busy_until = until
        try:
            self.beat()
        except RedisError:
            log.warning("heartbeat of %s not written; the next beat retries", self.name)

    def start(self) -> None:
        """Beat now and then every `every` seconds, in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and say goodbye (a worker that dies just stops beating)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.every)
        try:
            self.client.hdel(WORKERS, self.name)
        except RedisError:
            log.warning("could not remove the heartbeat of %s", self.name)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
            except RedisError:
                log.warning("heartbeat of %s not written; retrying", self.name, exc_info=True)
            self._stop.wait(self.every)


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
    return Seen(
        name, tuple(map(str, entry["queues"])), times[0], None if until is None else times[1]
    )


def read(client: redis.Redis, now: float) -> list[Seen]:
    """Every worker heard from in the last day; older entries are deleted on the way."""
    workers = parse(client.hgetall(WORKERS))  # one field per worker: as many as GPUs
    stale = [w.name for w in workers if w.seen < now - FORGET_S]
    if stale:
        client.hdel(WORKERS, *stale)
    return [w for w in workers if w.seen >= now - FORGET_S]


def alive(workers: list[Seen], queue: str, now: float, heartbeat_s: float) -> list[Seen]:
    """The workers among these that serve `queue` and beat recently."""
    cutoff = now - ALIVE_BEATS * heartbeat_s
    return [w for w in workers if queue in w.queues and w.seen >= cutoff]
