"""Estimated start times of queued jobs, from a per-queue snapshot read at most once a second.

The snapshot (when each live worker of the queue is free, the recent mean run time) is shared
by every status and stream of the API process, so a thousand open streams cost Redis a few
reads a second.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis.asyncio as aioredis

from app.api.live import eta
from app.models import Kind
from app.store import workers as heartbeats
from app.store.keys import METRICS, WORKERS

SNAPSHOT_S = 1.0


@dataclass(frozen=True)
class QueueLoad:
    """What an estimate needs to know about one queue, and when it was read."""

    free_at: list[float]  # for each live worker serving the queue, when it is free (Unix s)
    mean_run_s: float | None
    read_at: float

    @property
    def workers(self) -> int:
        """Live workers serving the queue."""
        return len(self.free_at)


class Estimator:
    """Estimates when a queued job starts (Unix seconds)."""

    def __init__(self, client: aioredis.Redis, heartbeat_s: float) -> None:
        self.client, self.heartbeat_s = client, heartbeat_s
        self._loads: dict[Kind, QueueLoad] = {}

    async def start_at(self, kind: Kind, position: int, duration_s: float) -> float | None:
        """When the job at `position` in `kind` should start; None when no worker serves it.
        Before any run is known, the job's own duration stands in for the mean run time."""
        load = await self.load(kind)
        mean = duration_s if load.mean_run_s is None else load.mean_run_s
        wait = eta.wait_s(position, [t - load.read_at for t in load.free_at], mean)
        return None if wait is None else load.read_at + wait

    async def load(self, kind: Kind, fresh: bool = False) -> QueueLoad:
        """The queue's snapshot, read again when older than SNAPSHOT_S (or when fresh)."""
        now = time.time()
        cached = self._loads.get(kind)
        if not fresh and cached is not None and now - cached.read_at < SNAPSHOT_S:
            return cached
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(WORKERS)  # one field per worker
            pipe.hget(METRICS, f"run_ewma:{kind}")
            workers_raw, mean = await pipe.execute()
        workers = heartbeats.alive(heartbeats.parse(workers_raw), kind, now, self.heartbeat_s)
        free_at = [w.busy_until or now for w in workers]  # busy with a job of either queue
        load = QueueLoad(free_at, None if mean is None else float(mean), now)
        self._loads[kind] = load
        return load
