"""The fleet as the heartbeats show it: the workers heard within FLEET_TTL_S, each with its host,
class and memory (app/store/workers.py Seen), and their counts by host and by class.

The fleet is wider than the workers alive now: a worker silent for less than FLEET_TTL_S
(default 600 s) keeps its place, whether it died or was stopped on purpose, so that a host that
restarts, or a worker that dies and comes back, does not make the jobs only its class can run
look unservable meanwhile. Its heartbeat is written twice for that: to the workers' hash, which
a goodbye empties, and to the fleet's (FLEET), which only time does (each read forgets the
entries older than the TTL). A broken worker (its device is unusable) is out of it until it is
replaced. Reads are one HGETALL of the fleet's hash: one field per GPU, never per job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

import redis
import redis.asyncio

from app.fleet.catalog import Catalog
from app.store.keys import FLEET
from app.store.workers import ALIVE_BEATS, Seen, parse


def in_fleet(workers: Iterable[Seen], ttl_s: float, now: float) -> list[Seen]:
    """The workers among these heard within ttl_s of now (Redis's clock) and not broken."""
    return [w for w in workers if w.seen >= now - ttl_s and w.broken is None]


def stale(workers: Iterable[Seen], ttl_s: float, now: float) -> list[str]:
    """The names of the workers not heard within ttl_s: the fleet's hash forgets them."""
    return [w.name for w in workers if w.seen < now - ttl_s]


def live_fleet(client: redis.Redis, ttl_s: float, now: float) -> list[Seen]:
    """The fleet: every worker heard within ttl_s (FLEET_TTL_S) of now and not broken."""
    heard = parse(client.hgetall(FLEET))
    if gone := stale(heard, ttl_s, now):
        client.hdel(FLEET, *gone)
    return in_fleet(heard, ttl_s, now)


async def live_fleet_async(client: redis.asyncio.Redis, ttl_s: float, now: float) -> list[Seen]:
    """live_fleet for the API's event loop."""
    heard = parse(await client.hgetall(FLEET))
    if gone := stale(heard, ttl_s, now):
        await client.hdel(FLEET, *gone)
    return in_fleet(heard, ttl_s, now)


def live_classes(fleet: Iterable[Seen]) -> set[str]:
    """The classes some worker of this fleet (live_fleet's answer) has: a job that none of its
    classes is among waits with `waiting_for: "gpu_class"`. Empty without a catalog."""
    return {w.gpu_class for w in fleet if w.gpu_class is not None}


def largest_host(fleet: Iterable[Seen], kind: str, classes: Collection[str] = ()) -> int:
    """The most cards of one class on one host among the workers of this fleet (live_fleet's
    answer) that serve queue `kind`, of one of `classes` (empty: any class): the most cards a
    job of that queue and those classes may take at once (issue 42). Each worker drives one
    card; one that does not say its host (a release before the fleet) is a host of its own."""
    cards: Counter[tuple[str, str | None]] = Counter()
    for worker in fleet:
        if kind in worker.queues and (not classes or worker.gpu_class in classes):
            cards[(worker.host or f"\0{worker.name}", worker.gpu_class)] += 1
    return max(cards.values(), default=0)


@dataclass
class Tally:
    """Workers counted: in the fleet, alive now (they beat within the last ALIVE_BEATS
    heartbeats), and busy (alive and running a job)."""

    workers: int = 0
    alive: int = 0
    busy: int = 0

    def count(self, worker: Seen, beating: bool) -> None:
        """Count one worker of the fleet."""
        self.workers += 1
        self.alive += beating
        self.busy += beating and worker.busy_until is not None


@dataclass
class HostTally(Tally):
    """The workers of one class on one host (host None: a worker of a release before the
    fleet, which does not say its host)."""

    host: str | None = None
    gpu_class: str | None = None
    memory_gb: float | None = None


@dataclass
class ClassTally(Tally):
    """The workers of one class across the fleet, and on how many hosts; price None for a class
    that workers say and the catalog lacks (they started with another GPU_CLASSES)."""

    gpu_class: str | None = None
    memory_gb: float | None = None
    price: float | None = None
    hosts: set[str | None] = field(default_factory=set)


@dataclass(frozen=True)
class FleetSummary:
    """The fleet by host (one row per host and class) and by class (every class of the catalog,
    those without a worker included)."""

    hosts: list[HostTally]
    classes: list[ClassTally]


def summary(
    workers: Iterable[Seen], catalog: Catalog, ttl_s: float, now: float, heartbeat_s: float
) -> FleetSummary:
    """The fleet among these heartbeats, counted by host and class and by class."""
    cutoff = now - ALIVE_BEATS * heartbeat_s
    classes = {
        c.name: ClassTally(
            gpu_class=c.name, memory_gb=c.memory_gb if catalog.declared else None, price=c.price
        )
        for c in catalog.classes
    }
    hosts: dict[tuple[str, str], HostTally] = {}
    for worker in in_fleet(workers, ttl_s, now):
        beating = worker.seen >= cutoff
        key = (worker.host or "", worker.gpu_class or "")
        at = hosts.setdefault(key, HostTally(host=worker.host, gpu_class=worker.gpu_class))
        at.memory_gb = at.memory_gb if worker.memory_gb is None else worker.memory_gb
        at.count(worker, beating)
        of = classes.setdefault(
            worker.gpu_class, ClassTally(gpu_class=worker.gpu_class, memory_gb=worker.memory_gb)
        )
        of.count(worker, beating)
        of.hosts.add(worker.host)
    return FleetSummary([hosts[k] for k in sorted(hosts)], list(classes.values()))
