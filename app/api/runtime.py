"""Runtime: what the API's handlers share, opened at start-up and closed at shutdown."""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from prometheus_client.registry import CollectorRegistry
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from app import connections
from app.api.clock import RedisClock
from app.api.collector import ServiceCollector, registry
from app.api.limits import RateLimiter
from app.api.live.estimates import Estimator
from app.api.live.events import EventHub, cancel
from app.api.live.places import Places
from app.artifacts import ArtifactStore, open_artifacts
from app.auth import Account
from app.jobs import Registry, load_registry
from app.ledger.live import LiveAccounts
from app.ledger.stores import Ledger, open_ledger
from app.models import Kind
from app.settings import Settings
from app.store import JobStore
from app.vtrr.aio import AsyncFairQueue
from app.wiring import limits
from app.wiring.service import Service, build

#: Fail fast when Redis is away, so a request answers 503 instead of hanging.
log = logging.getLogger(__name__)
REDIS_TIMEOUT_S = 2.0
#: How often an API process puts every account's limits on the queues again, besides at its
#: start and at each change: a Redis that restarted empty has lost them.
LIMITS_EVERY_S = 30.0
#: How long a call waits for one of the pool's connections before it fails (503, or a stream's
#: retry): a burst queues for a moment instead of opening a connection per waiting call.
POOL_WAIT_S = 5.0
#: The names the API's connections carry in CLIENT LIST, so an operator can count them.
CLIENT_NAME = "fairgpu-api"
HUB_CLIENT_NAME = "fairgpu-api-events"
ACCOUNTS_CLIENT_NAME = "fairgpu-api-accounts"


@dataclass
class Runtime:
    """Settings, the accounts (live from the SQL account store) and the ledger, the asyncio
    Redis client and what is built on it."""

    settings: Settings
    accounts: LiveAccounts
    redis: aioredis.Redis
    store: JobStore
    queues: dict[Kind, AsyncFairQueue]
    service: Service
    hub: EventHub
    limiter: RateLimiter
    estimator: Estimator
    metrics: CollectorRegistry
    places: Places
    job_types: Registry
    artifacts: ArtifactStore
    ledger: Ledger
    accounts_client: aioredis.Redis
    clock: RedisClock
    _following: list[asyncio.Task[None]] = field(default_factory=list, repr=False)

    @classmethod
    def open(cls, settings: Settings) -> Runtime:
        """Build everything for one API process; nothing connects until first used. A job type
        that cannot be loaded (RegistryError) stops the process here, before it serves."""
        job_types = _job_types(tuple(settings.job_modules))
        ledger = open_ledger(settings)
        accounts = LiveAccounts(ledger.accounts.snapshot)
        # A plain pool keeps every connection it ever opened, one per call that was in flight
        # at the busiest moment (200 streams opened at once left 209): a bounded one that
        # waits makes calls queue instead, and costs no more CPU per request (docs/benchmarks.md).
        # Streams hold none of these while they wait: they share the hub's one connection.
        client = connections.async_pooled(
            settings,
            settings.api_redis_connections,
            POOL_WAIT_S,
            socket_timeout=REDIS_TIMEOUT_S,
            socket_connect_timeout=REDIS_TIMEOUT_S,
            health_check_interval=30,
            client_name=CLIENT_NAME,
        )
        # The hub's subscription waits for messages indefinitely: no read timeout on it. It
        # reconnects itself, so that it knows when it did: no retries inside redis-py.
        hub_client = connections.async_client(
            settings,
            socket_connect_timeout=REDIS_TIMEOUT_S,
            client_name=HUB_CLIENT_NAME,
            retry=Retry(NoBackoff(), 0),
        )
        service = build(settings, accounts)
        clock = RedisClock(client)
        replicas = settings.min_replicas
        queues = {kind: q.aio(client, replicas) for kind, q in service.queues.items()}
        hub = EventHub(hub_client)
        collector = ServiceCollector(
            service.recorder.redis,
            service.queues,
            settings.heartbeat_seconds,
            lambda: hub.streams,
            job_types=[t.name for t in job_types.types()],
        )
        return cls(
            settings,
            accounts,
            client,
            JobStore(client, settings),
            queues,
            service,
            hub,
            RateLimiter(client, settings.rate_limit_per_s, clock),
            Estimator(client, clock, settings.heartbeat_seconds, settings.long_every),
            registry(collector),
            Places(hub, queues),
            job_types,
            open_artifacts(settings),
            ledger,
            # Account changes are announced on a channel: a subscription of its own, which
            # waits for messages indefinitely (no read timeout).
            connections.async_client(
                settings,
                socket_connect_timeout=REDIS_TIMEOUT_S,
                client_name=ACCOUNTS_CLIENT_NAME,
            ),
            clock,
        )

    async def start(self) -> None:
        """Start listening for changes: of jobs, queues, accounts and keys; put the accounts'
        limits on the queues (then keep them there: a Redis restarted empty loses them)."""
        await self.hub.start()
        self.places.start()
        await self.apply_limits()
        self._following = [
            asyncio.create_task(self.accounts.follow(self.accounts_client)),
            asyncio.create_task(self.clock.follow()),
            asyncio.create_task(self._keep_limits()),
        ]

    async def apply_limits(self, account: Account | None = None) -> None:
        """Put one account's limits (or every account's) on both queues, and publish the
        triggers for the jobs that lets start. Redis out of reach: logged, tried again later."""
        try:
            if account is None:
                triggers = await limits.apply_all(self.queues, self.accounts.all())
            else:
                triggers = await limits.apply(self.queues, account)
        except RedisError:
            log.warning("the accounts' limits could not be put on the queues", exc_info=True)
            return
        for kind, n in triggers.items():
            if n:
                await asyncio.to_thread(self.service.queues[kind].publish_triggers, n)

    async def _keep_limits(self) -> None:
        while True:
            await asyncio.sleep(LIMITS_EVERY_S)
            await self.apply_limits()

    async def close(self) -> None:
        """Stop listening, and close the connections."""
        for task in self._following:
            await cancel(task)
        await self.accounts_client.aclose()
        await self.places.stop()
        await self.hub.stop()
        await self.redis.aclose()
        self.service.close()
        self.ledger.close()


@functools.lru_cache(maxsize=8)
def _job_types(modules: tuple[str, ...]) -> Registry:
    """The job types, loaded once per process and JOB_MODULES: the tests open a Runtime per
    test, and the scan of the installed packages' entry points alone takes some 10 ms. (A
    RegistryError is not cached: it stops the process.)"""
    return load_registry(modules)
