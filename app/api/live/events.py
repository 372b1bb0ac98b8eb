"""EventHub: one Redis pub/sub connection per API process, subscribed to what its streams follow.

The scripts publish a job's id on the job's own channel at every change of it (the change itself
is in the job's event stream), and a queue's name on the moves channel whenever its order
changes (for the positions of queued jobs). The hub subscribes to a job's channel while a stream
of this process follows that job, and to the moves channel while one follows a queue's order: a
process hears only what its own streams need, so a submit costs an API process nothing unless
one of its streams follows that job or queue, however many API processes there are.

A subscription counts from Redis's confirmation: a new waiter gets its event once its channel is
confirmed, so what it reads next (the job's stream, a queue's places) cannot miss a change that
the subscription was too late to hear. Should the confirmation take longer than SUBSCRIBE_WAIT_S,
the waiter goes on and is woken when it comes. When the connection is lost the hub wakes every
waiter (so a stream learns that Redis may be away: see app/api/live/outage.py) and clears
`connected`; once it has subscribed again to all that is followed it sets `connected` and wakes
every waiter again, and they read again from where they were. The hub alone reconnects (its
client has redis-py's own retries turned off): a reconnect hidden inside redis-py would lose
what was published meanwhile without anyone being woken. No stream polls Redis on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, defaultdict
from collections.abc import AsyncIterator

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from app.store.keys import CHANNEL, MOVES, job_channel

log = logging.getLogger(__name__)
RETRY_S = 1.0
SUBSCRIBE_WAIT_S = 2.0
#: How long a cancel of a hub task may take before it is sent again (see cancel): a task ends at
#: its next await once a cancel lands, in microseconds; a swallowed one costs this much.
CANCEL_AGAIN_S = 0.02
#: Always subscribed: it keeps the connection listening while no stream follows anything.
IDLE = f"{CHANNEL}:hub"


class EventHub:
    """Wakes the waiters of a job when its channel says it changed, and those of a queue's order
    when the moves channel names that queue."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._waiters: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self._followed: Counter[str] = Counter()  # channel -> waiters that need it
        self._changed: asyncio.Queue[str] = asyncio.Queue()  # channels to subscribe or drop
        self._pubsub: PubSub | None = None  # while connected
        self._subscribed: set[str] = set()  # asked of the current connection
        self._ready: dict[str, asyncio.Event] = {}  # followed channel -> set once confirmed
        self._late: set[str] = set()  # channels a waiter stopped waiting for
        self._tasks: list[asyncio.Task[None]] = []
        #: Set while the subscription's connection is up: Redis answers, as far as the hub knows.
        self.connected = asyncio.Event()

    async def start(self) -> None:
        """Start listening, and following the streams' needs, in the background."""
        self._tasks = [
            asyncio.create_task(self._listen(), name="event-hub"),
            asyncio.create_task(self._subscriptions(), name="event-hub-subscriptions"),
        ]

    async def stop(self) -> None:
        """Stop listening, and close the subscription's connection."""
        for task in self._tasks:
            await cancel(task)
        await self._client.aclose()

    @contextlib.asynccontextmanager
    async def subscribe(self, job_id: str) -> AsyncIterator[asyncio.Event]:
        """An event that is set whenever the job changes; clear it after reading the changes."""
        async with self._waiting(job_id, job_channel(job_id)) as event:
            yield event

    @contextlib.asynccontextmanager
    async def moves(self, queue: str) -> AsyncIterator[asyncio.Event]:
        """An event that is set whenever the order of the queue changes."""
        async with self._waiting(f"{MOVES}:{queue}", MOVES) as event:
            yield event

    @contextlib.asynccontextmanager
    async def _waiting(self, topic: str, channel: str) -> AsyncIterator[asyncio.Event]:
        event = asyncio.Event()
        self._waiters[topic].add(event)
        self._followed[channel] += 1
        if self._followed[channel] == 1:
            self._changed.put_nowait(channel)
        ready = self._ready.setdefault(channel, asyncio.Event())
        try:
            if not ready.is_set():
                try:
                    async with asyncio.timeout(SUBSCRIBE_WAIT_S):
                        await ready.wait()
                except TimeoutError:
                    self._late.add(channel)  # Redis slow or away: wake this one on confirmation
            yield event
        finally:
            waiters = self._waiters[topic]
            waiters.discard(event)
            if not waiters:
                del self._waiters[topic]
            self._followed[channel] -= 1
            if not self._followed[channel]:
                del self._followed[channel]
                self._changed.put_nowait(channel)

    @property
    def streams(self) -> int:
        """How many streams are waiting on this hub."""
        return sum(len(w) for t, w in self._waiters.items() if not t.startswith(MOVES))

    def _wake(self, topic: str) -> None:
        for event in self._waiters.get(topic, ()):
            event.set()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()

    def _confirmed(self, channel: str) -> None:
        """Mark a channel's subscription as confirmed; wake its waiters if some gave up waiting."""
        if channel in self._ready:
            self._ready[channel].set()
        if channel not in self._late:
            return
        self._late.discard(channel)
        if channel == MOVES:
            for topic in [t for t in self._waiters if t.startswith(f"{MOVES}:")]:
                self._wake(topic)
        else:
            self._wake(_job_of(channel))

    async def _subscriptions(self) -> None:
        """Bring the connection's subscriptions in line with what is followed, one channel at a
        time and in order, so a drop and a new follow of the same channel cannot cross."""
        while True:
            channel = await self._changed.get()
            pubsub = self._pubsub
            if pubsub is None:
                continue  # the next connection subscribes to everything followed then
            wanted, asked = channel in self._followed, self._subscribed
            try:
                if wanted and channel not in asked:
                    asked.add(channel)
                    await pubsub.subscribe(channel)
                elif not wanted and channel in asked:
                    asked.discard(channel)
                    self._ready.pop(channel, None)
                    self._late.discard(channel)
                    await pubsub.unsubscribe(channel)
            except (RedisError, OSError):
                log.warning("event subscription of %s not changed", channel, exc_info=True)

    async def _listen(self) -> None:
        lost = False  # one log line when the connection goes, one when it is back
        while True:
            try:
                async with self._client.pubsub() as pubsub:
                    await pubsub.subscribe(IDLE)
                    if lost:
                        log.info("event subscription back")
                        lost = False
                    self._connect(pubsub)
                    async for message in pubsub.listen():
                        kind, channel = message["type"], _text(message["channel"])
                        if kind == "message":
                            self._wake(_topic(channel, _text(message["data"])))
                        elif kind == "subscribe":
                            self._confirmed(channel)
            except (RedisError, OSError) as exc:
                if not lost:
                    log.warning("event subscription lost (%s); retrying every %.0f s", exc, RETRY_S)
                    lost = True
            finally:
                self._pubsub = None
                if self.connected.is_set():
                    self.connected.clear()
                    self._wake_all()  # streams waiting for a change must learn Redis may be away
            await asyncio.sleep(RETRY_S)  # a pause before reconnecting, not a wait on a result

    def _connect(self, pubsub: PubSub) -> None:
        """Take a new connection into use: subscribe again to all that is followed, and wake
        every waiter, since anything published while the hub was away is in the streams."""
        self._pubsub, self._subscribed = pubsub, {IDLE}
        self.connected.set()
        # Waiters may hold these events already: keep them, unconfirmed for now.
        self._ready = {c: self._ready.get(c, asyncio.Event()) for c in self._followed}
        for ready in self._ready.values():
            ready.clear()
        self._late.clear()  # every waiter is woken below
        for channel in self._followed:
            self._changed.put_nowait(channel)
        self._wake_all()


async def cancel(task: asyncio.Task[None]) -> None:
    """Cancel a background task and wait for its end. Cancel until it takes: on Python 3.11 a
    cancel that lands as an inner wait_for completes (redis-py's connect) can be swallowed, and
    the task would go on."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_AGAIN_S)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _topic(channel: str, data: str) -> str:
    """Whom a message is for: `<MOVES>:<queue>` on MOVES, else the job whose channel it is."""
    return f"{MOVES}:{data}" if channel == MOVES else _job_of(channel)


def _job_of(channel: str) -> str:
    """The job whose channel this is (see job_channel)."""
    return channel.removeprefix(f"{CHANNEL}:")
