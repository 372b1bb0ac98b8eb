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
from app.vtrr.wire import as_text
from app.wiring.service import WEIGHT_PER_S, job_weight

SNAPSHOT_S = 1.0


@dataclass(frozen=True)
class QueueLoad:
    """What an estimate needs to know about one queue, and when it was read."""

    free_at: list[float]  # for each live worker serving the queue, when it is free (Unix s)
    shared: list[bool]  # for each of them, whether it serves the other queue too
    classes: list[str | None]  # for each of them, its class of card (a mixed fleet's)
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

    async def start_at(
        self, kind: Kind, position: int, duration_s: float, gpu_classes: tuple[str, ...] = ()
    ) -> float | None:
        """When the job at `position` in `kind` should start; None when no worker serves it. A
        job of a mixed fleet (gpu_classes) counts only the workers of its classes."""
        load = await self.load(kind)
        own_s = job_weight(duration_s) / WEIGHT_PER_S  # as the queue's sum counts it
        ahead = eta.work_ahead_s(position, load.line, own_s)
        workers = [
            eta.Worker(t - load.read_at, shared)
            for t, shared, gpu_class in zip(load.free_at, load.shared, load.classes, strict=True)
            if not gpu_classes or gpu_class in gpu_classes
        ]
        wait = eta.wait_s(kind, position, ahead, workers, load.other, self.long_every)
        return None if wait is None else load.read_at + wait

    async def _pooled(self, pools: dict[Kind, set[bytes]]) -> dict[Kind, int]:
        """The jobs queued in each queue's pools' lines (a mixed fleet), one read of them all."""
        lines = [(k, Keys.for_queue(k).pool_line(as_text(p))) for k in KINDS for p in pools[k]]
        counts = dict.fromkeys(KINDS, 0)
        if lines:
            async with self.client.pipeline(transaction=False) as pipe:
                for _, line in lines:
                    pipe.zcard(line)
                for (k, _), n in zip(lines, await pipe.execute(), strict=True):
                    counts[k] += int(n)
        return counts

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
                pipe.smembers(keys.pools)  # a mixed fleet's lines of jobs (vtrr's kinds)
            workers_raw, *sums = await pipe.execute()
        pooled = await self._pooled({k: sums[3 * i + 2] for i, k in enumerate(KINDS)})
        lines = {
            k: eta.Line(int(sums[3 * i]) + pooled[k], int(sums[3 * i + 1] or 0) / WEIGHT_PER_S)
            for i, k in enumerate(KINDS)
        }
        seen = heartbeats.parse(workers_raw)
        for k in KINDS:
            workers = heartbeats.alive(seen, k, now, self.heartbeat_s)
            self._loads[k] = QueueLoad(
                free_at=[w.busy_until or now for w in workers],  # busy with a job of either queue
                shared=[set(KINDS) <= set(w.queues) for w in workers],
                classes=[w.gpu_class for w in workers],
                line=lines[k],
                other=next(lines[o] for o in KINDS if o != k),
                read_at=now,
            )
        return self._loads[kind]
