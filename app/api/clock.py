"""One clock for every process: Redis's.

Leases, heartbeats and a job's start and end are stamped with Redis's TIME, so that hosts whose
own clocks disagree still agree on what they compare. An API process compares such stamps with
"now" (a worker alive, a job's estimated start, the current second of a key's rate count), so
it reads "now" from Redis's clock too: its own clock plus the offset to Redis's, measured with
TIME when it starts and every SYNC_S after (the offset drifts far slower than that).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import redis.asyncio as aioredis
from redis.exceptions import RedisError

#: How often the offset to Redis's clock is measured again (seconds).
SYNC_S = 10.0
#: An offset above this is said in the log once: this host's clock wants NTP.
SKEW_WARNING_S = 1.0
log = logging.getLogger(__name__)


class RedisClock:
    """Redis's time, read off this process's clock and a measured offset."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client
        self.offset = 0.0
        #: How many times the offset was measured (a test tells the clock's round trips apart).
        self.syncs = 0
        self._warned = False

    def now(self) -> float:
        """Redis's time now (Unix seconds), to within a round trip's half."""
        return time.time() + self.offset

    async def sync(self) -> None:
        """Measure the offset: Redis's TIME against the middle of the round trip."""
        before = time.time()
        seconds, micros = await self.client.time()
        after = time.time()
        self.offset = seconds + micros / 1e6 - (before + after) / 2
        self.syncs += 1
        if abs(self.offset) > SKEW_WARNING_S and not self._warned:
            self._warned = True
            log.warning(
                "this host's clock is %.1f s off Redis's; fairgpu uses Redis's", -self.offset
            )

    async def follow(self, every: float = SYNC_S) -> None:
        """Measure now and every `every` seconds, until cancelled; Redis away keeps the last
        offset."""
        while True:
            # Redis away: the last offset holds; requests meet the outage themselves
            with contextlib.suppress(RedisError, OSError):
                await self.sync()
            await asyncio.sleep(every)
