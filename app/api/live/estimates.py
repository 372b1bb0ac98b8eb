"""Estimated start times of queued jobs, from a snapshot of both queues read at most once a second.

The snapshot (when each live worker of each queue is free and whether it serves both, and each
queue's running sums: jobs queued and their declared GPU-time) is shared by every status and
stream of the API process, so a thousand open streams cost Redis a few O(1) reads a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from app.api.clock import RedisClock
from app.api.live import eta
from app.models import KINDS, Kind
from app.store import workers as heartbeats
from app.store.keys import WORKERS
from app.vtrr.keys import Keys
from app.wiring.service import WEIGHT_PER_S, job_weight

SNAPSHOT_S = 1.0


@dataclass(frozen=True)
class QueueLoad:
    """What an estimate needs to know about one queue, and when it was read."""

    free_at: list[float]  # for each live worker serving the queue, when it is free (Unix s)
    shared: list[bool]  # for each of them, whether it serves the other queue too
    line: eta.Line  # this queue's jobs queued and their declared seconds
    other: eta.Line  # the other queue's
    read_at: float

    @property
    def workers(self) -> int:
        """Live workers serving the queue."""
        return len(self.free_at)


class Estimator:
    """Estimates when a queued job starts (Unix seconds)."""

    def __init__(
        self, client: aioredis.Redis, clock: RedisClock, heartbeat_s: float, long_every: int = 4
    ) -> None:
        self.client, self.heartbeat_s, self.long_every = client, heartbeat_s, long_every
        self.clock = clock  # heartbeats and busy_until are Redis's time: so is "now" here
        self._loads: dict[Kind, QueueLoad] = {}

    async def start_at(self, kind: Kind, position: int, duration_s: float) -> float | None:
        """When the job at `position` in `kind` should start; None when no worker serves it."""
        load = await self.load(kind)
        own_s = job_weight(duration_s) / WEIGHT_PER_S  # as the queue's sum counts it
        ahead = eta.work_ahead_s(position, load.line, own_s)
        workers = [
            eta.Worker(t - load.read_at, shared)
            for t, shared in zip(load.free_at, load.shared, strict=True)
        ]
        wait = eta.wait_s(kind, position, ahead, workers, load.other, self.long_every)
        return None if wait is None else load.read_at + wait

    async def load(self, kind: Kind, fresh: bool = False) -> QueueLoad:
        """The queue's snapshot, read again when older than SNAPSHOT_S (or when fresh)."""
        now = self.clock.now()
        cached = self._loads.get(kind)
        if not fresh and cached is not None and now - cached.read_at < SNAPSHOT_S:
            return cached
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(WORKERS)  # one field per worker
            for k in KINDS:
                keys = Keys.for_queue(k)
                pipe.zcard(keys.queue)
                pipe.get(keys.queued_weight)  # a running sum kept by the queue's scripts
            workers_raw, *sums = await pipe.execute()
        lines = {
            k: eta.Line(int(sums[2 * i]), int(sums[2 * i + 1] or 0) / WEIGHT_PER_S)
            for i, k in enumerate(KINDS)
        }
        seen = heartbeats.parse(workers_raw)
        for k in KINDS:
            workers = heartbeats.alive(seen, k, now, self.heartbeat_s)
            self._loads[k] = QueueLoad(
                free_at=[w.busy_until or now for w in workers],  # busy with a job of either queue
                shared=[set(KINDS) <= set(w.queues) for w in workers],
                line=lines[k],
                other=next(lines[o] for o in KINDS if o != k),
                read_at=now,
            )
        return self._loads[kind]
