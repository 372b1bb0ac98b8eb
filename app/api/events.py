"""EventHub: one Redis subscription per API process, fanned out to the streams it serves.

Workers and the API publish a job's id on the events channel at every change (the change itself
is in the job's event stream), and a queue's name on the moves channel whenever its order
changes (for the positions of queued jobs). The hub wakes the local streams of that job or
queue, which then read the stream from their last event id; after a lost connection it wakes
every stream, so a change made meanwhile is read from the stream all the same. No stream polls
Redis on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.store import CHANNEL, MOVES

log = logging.getLogger(__name__)
RETRY_S = 1.0


class EventHub:
    """Wakes the waiters of a job when its id is published on the events channel."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._waiters: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start listening in the background."""
        self._task = asyncio.create_task(self._listen(), name="event-hub")

    async def stop(self) -> None:
        """Stop listening, and close the subscription's connection."""
        task = self._task
        # Cancel until it takes: on Python 3.11 a cancel that lands as an inner wait_for
        # completes (redis-py's connect) can be swallowed, and the task would listen on.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.1)
        await self._client.aclose()

    @contextlib.asynccontextmanager
    async def subscribe(self, job_id: str) -> AsyncIterator[asyncio.Event]:
        """An event that is set whenever the job changes; clear it after reading the changes."""
        async with self._waiting(job_id) as event:
            yield event

    @contextlib.asynccontextmanager
    async def moves(self, queue: str) -> AsyncIterator[asyncio.Event]:
        """An event that is set whenever the order of the queue changes."""
        async with self._waiting(f"{MOVES}:{queue}") as event:
            yield event

    @contextlib.asynccontextmanager
    async def _waiting(self, topic: str) -> AsyncIterator[asyncio.Event]:
        event = asyncio.Event()
        self._waiters[topic].add(event)
        try:
            yield event
        finally:
            waiters = self._waiters[topic]
            waiters.discard(event)
            if not waiters:
                del self._waiters[topic]

    @property
    def streams(self) -> int:
        """How many streams are waiting on this hub."""
        return sum(len(w) for t, w in self._waiters.items() if not t.startswith(MOVES))

    def _wake(self, job_id: str) -> None:
        for event in self._waiters.get(job_id, ()):
            event.set()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()

    async def _listen(self) -> None:
        while True:
            try:
                async with self._client.pubsub() as pubsub:
                    await pubsub.subscribe(CHANNEL, MOVES)
                    self._wake_all()  # anything published while we were away is in the streams
                    async for message in pubsub.listen():
                        if message["type"] == "message":
                            self._wake(_topic(message["channel"], message["data"]))
            except (RedisError, OSError):
                log.warning("event subscription lost; retrying in %.0f s", RETRY_S, exc_info=True)
                await asyncio.sleep(RETRY_S)  # a pause before reconnecting, not a wait on a result


def _topic(channel: bytes | str, data: bytes | str) -> str:
    """Whom a message is for: a job id on the events channel, `<MOVES>:<queue>` on MOVES."""
    text = data.decode() if isinstance(data, bytes) else data
    name = channel.decode() if isinstance(channel, bytes) else channel
    return f"{MOVES}:{text}" if name == MOVES else text
