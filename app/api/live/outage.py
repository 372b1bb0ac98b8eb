"""Outage: how an open event stream waits out Redis being away, and how it says it gave up.

A stream whose read fails in a way a retry may get past (app/errors.py's `transient`) pauses
and reads again from its last event, for up to SSE_OUTAGE_S from the first failure in a row.
While it pauses it holds no Redis connection and asks Redis nothing: it waits for the event
hub to be connected again (one connection per API process retries, not one per stream), and at
least a short backoff, doubling from RETRY_FIRST_S to RETRY_MOST_S with jitter, so that a Redis
that accepts connections but refuses commands (LOADING, a failover) is not hammered either.
sse-starlette's keep-alive comments go on meanwhile.

Past the bound the stream ends with one event that a client can act on:

    event: error
    retry: <ms>          a plain EventSource reconnects after this long, with Last-Event-ID
    data: {"detail": "<why>"}

It carries no id, so the client's Last-Event-ID stays its last real event and it misses
nothing. The retry is drawn from RECONNECT_MS per stream, so that thousands of streams ended by
one outage do not all come back in the same instant.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass

from sse_starlette import ServerSentEvent

from app.api.live.events import EventHub
from app.errors import transient

RETRY_FIRST_S = 0.1
RETRY_MOST_S = 2.0
RECONNECT_MS = (2_000, 10_000)


class RedisAwayError(Exception):
    """Redis stayed unreachable for longer than the stream waits."""


@dataclass
class Outage:
    """The failures in a row of one stream's reads, and how long it may go on waiting."""

    hub: EventHub
    bound_s: float
    since: float | None = None  # monotonic time of the first failure in a row
    failures: int = 0

    async def wait(self, exc: BaseException) -> None:
        """Pause after a failed read until a retry may work; re-raise an error that no retry
        gets past, and raise RedisAwayError once the outage has lasted bound_s."""
        if not transient(exc):
            raise exc
        now = time.monotonic()
        if self.since is None:
            self.since = now
        left = self.since + self.bound_s - now
        if left <= 0:
            raise RedisAwayError(f"Redis unreachable for {self.bound_s:g} s") from exc
        self.failures += 1
        pause = min(RETRY_MOST_S, RETRY_FIRST_S * 2 ** (self.failures - 1))
        try:
            async with asyncio.timeout(left):
                await asyncio.sleep(pause * random.uniform(0.5, 1.0))  # a backoff, not a poll
                await self.hub.connected.wait()
        except TimeoutError:
            raise RedisAwayError(f"Redis unreachable for {self.bound_s:g} s") from exc

    def over(self) -> None:
        """A read worked: the next failure starts a new outage."""
        self.since, self.failures = None, 0


def error_event(detail: str) -> ServerSentEvent:
    """The stream's last event when it cannot go on: `event: error`, a reason and `retry:`."""
    return ServerSentEvent(
        data=json.dumps({"detail": detail}),
        event="error",
        retry=random.randint(*RECONNECT_MS),
    )
