"""Places: where each queued job with an open stream stands in its queue, kept up to date.

While this API process holds a stream in a queue, it follows that queue's moves. When the
queue's order changes (the moves channel), one batch call reads the places of every job
whose stream this API process holds, and wakes only the streams whose place moved enough to be
worth telling (see worth_telling); they then update from what they have, without reading Redis
themselves. A busy queue moves far more
often than anyone needs to be told, so each queue is re-read at most once every `pace` seconds,
longer when many streams are open (at most about MOVES_PER_S wakes a second).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from app.api.live.events import EventHub, cancel
from app.models import KINDS, Kind
from app.vtrr.aio import AsyncFairQueue

log = logging.getLogger(__name__)
PACE_S = 1.0
MOVES_PER_S = 1000


@dataclass(eq=False)
class Place:
    """One queued job's place, the place its client was last told, and an event set when the
    place has moved far enough from that to tell the client again."""

    position: int | None = None
    told: int | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


def worth_telling(told: int | None, now: int | None) -> bool:
    """Whether a client told `told` should hear of `now`: any change among the first ten places
    (or to or from none), further back a change of a tenth. A job far back hears of its place
    some dozens of times on its way to the front, not once per job that leaves ahead of it,
    which at thousands of streams would be millions of events."""
    if told is None or now is None:
        return told != now
    return abs(now - told) >= max(1, told // 10)


class Places:
    """Follows the queues' moves for the streams of this API process."""

    def __init__(self, hub: EventHub, queues: dict[Kind, AsyncFairQueue]) -> None:
        self.hub, self.queues = hub, queues
        self._places: dict[Kind, defaultdict[str, set[Place]]] = {
            kind: defaultdict(set) for kind in KINDS
        }
        self._watched = {kind: asyncio.Event() for kind in KINDS}  # set while it has streams
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Follow each queue in the background."""
        self._tasks = [
            asyncio.create_task(self._follow(kind), name=f"places-{kind}") for kind in KINDS
        ]

    async def stop(self) -> None:
        """Stop following."""
        for task in self._tasks:
            await cancel(task)

    @contextlib.asynccontextmanager
    async def watch(self, kind: Kind, job_id: str) -> AsyncIterator[Place]:
        """The job's place in line, updated while the context is open."""
        place = Place()
        self._places[kind][job_id].add(place)
        self._watched[kind].set()
        try:
            yield place
        finally:
            watchers = self._places[kind][job_id]
            watchers.discard(place)
            if not watchers:
                del self._places[kind][job_id]

    async def _follow(self, kind: Kind) -> None:
        """Follow the queue's moves while it has streams here (and until the next move after
        its last one closed); no process hears the moves of a queue it shows no one."""
        watched = self._watched[kind]
        while True:
            if not self._places[kind]:
                watched.clear()
            await watched.wait()
            async with self.hub.moves(kind) as moved:
                moved.set()  # read the places once now: a move before the subscription is missed
                await self._follow_moves(kind, moved)

    async def _follow_moves(self, kind: Kind, moved: asyncio.Event) -> None:
        while self._places[kind]:
            await moved.wait()
            moved.clear()
            try:
                await self._update(kind)
            except RedisError:
                log.warning("places in %s not read; the next move retries", kind)
            watchers = sum(len(w) for w in self._places[kind].values())
            await asyncio.sleep(max(PACE_S, watchers / MOVES_PER_S))  # a pace, not a wait

    async def _update(self, kind: Kind) -> None:
        ids = list(self._places[kind])
        for job_id, rank in zip(ids, await self.queues[kind].positions(ids), strict=True):
            for place in self._places[kind].get(job_id, ()):
                place.position = rank
                if worth_telling(place.told, rank):
                    place.changed.set()
