"""Fixtures of the API tests: the real app, its lifespan run, on the suite's real Redis.

Each test that asks for `api` runs the app's lifespan, and so has a Runtime of its own (clients,
event hub, rate limiter) on its own empty database. The FastAPI object under it is lent from APPS
and reused: FastAPI builds a route's request validation the first time the route is called,
several milliseconds a route per app, which an app made per test paid again in every test.

A module whose tests need no runtime of their own (none leaves a stream open, cuts or stops
Redis, or counts every command Redis hears) shares one among its tests instead (`shared_api`):
opening one, some 20 ms, was the largest part of most API tests. Between its tests the runtime
is put back where a new one starts (see `reset`), and each test must leave it idle (`idle`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI

from app.api.factory import create_app
from app.api.live.estimates import Estimator
from app.api.live.places import Places
from app.api.runtime import Runtime
from app.auth import Accounts
from app.dev.redis_server import RedisServer
from app.settings import Settings
from app.store.keys import job_channel
from tests.api.helpers import USERS_FILE, WAIT_S, StreamingASGITransport, Worker


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """For the module, so that a module's shared runtime (module_api) and its tests run on one
    event loop."""
    return "asyncio"


@pytest.fixture(scope="session")
def base_settings() -> Settings:
    """Read once: pydantic-settings looks at the whole environment each time (~8 ms)."""
    return Settings(users_file=USERS_FILE)


@pytest.fixture
def settings(base_settings: Settings, redis_url: str) -> Settings:
    return base_settings.model_copy(update={"redis_url": redis_url})


@dataclass
class Api:
    """The app with its lifespan running, and two clients on it: `client` (httpx's own ASGI
    transport, whole answers) and `stream` (answers that stream, for server-sent events)."""

    app: FastAPI
    client: httpx.AsyncClient
    stream: httpx.AsyncClient

    @property
    def runtime(self) -> Runtime:
        runtime: Runtime = self.app.state.runtime
        return runtime


class Apps:
    """FastAPI apps kept for the whole run, each lent to one user at a time (two apps open at
    once, as two API processes, are two apps). An app holds nothing of a run but its routes'
    validation and middleware: its lifespan makes everything else, and sets app.state anew."""

    def __init__(self) -> None:
        self._idle: list[tuple[Settings, FastAPI]] = []

    @contextlib.contextmanager
    def lend(self, settings: Settings) -> Iterator[FastAPI]:
        """An idle app made with settings equal to these, else a new one; returned afterwards."""
        found = next((i for i, (made, _) in enumerate(self._idle) if made == settings), None)
        app = create_app(settings) if found is None else self._idle.pop(found)[1]
        try:
            yield app
        finally:
            self._idle.append((settings, app))


APPS = Apps()


@contextlib.asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[None]:
    """The app's lifespan; its shutdown must end within WAIT_S (a hang fails, not blocks)."""
    lifespan = app.router.lifespan_context(app)
    await lifespan.__aenter__()
    try:
        yield
    finally:
        await asyncio.wait_for(lifespan.__aexit__(None, None, None), WAIT_S)


async def hub_listening(runtime: Runtime) -> None:
    """Wait until the app's event hub is subscribed, so that what a test observes in Redis is
    the requests' doing and not the hub still connecting."""
    async with runtime.hub.subscribe("hub-probe") as woken:
        async with asyncio.timeout(WAIT_S):
            while not woken.is_set():
                await runtime.redis.publish(job_channel("hub-probe"), "hub-probe")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), 0.05)


@contextlib.asynccontextmanager
async def open_api(settings: Settings, *, wait_for_hub: bool = True) -> AsyncIterator[Api]:
    base = "http://test"
    with APPS.lend(settings) as app:
        # raise_app_exceptions=False: a crash reaches the test as the 500 a client would get.
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with (
            running(app),
            httpx.AsyncClient(transport=transport, base_url=base) as client,
            httpx.AsyncClient(transport=StreamingASGITransport(app), base_url=base) as stream,
        ):
            api = Api(app, client, stream)
            if wait_for_hub:
                await hub_listening(api.runtime)
            yield api


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    async with open_api(settings) as opened:
        yield opened


@pytest.fixture
def worker(settings: Settings) -> Iterator[Worker]:
    opened = Worker.open(settings)
    yield opened
    opened.close()


# -- one runtime for a module's tests ------------------------------------------------------------
@pytest.fixture(scope="module")
def module_settings(base_settings: Settings, redis_server: RedisServer) -> Settings:
    """The settings of the module's shared runtime: a module whose API runs with other settings
    than `settings` overrides this."""
    return base_settings.model_copy(update={"redis_url": redis_server.url})


@pytest.fixture(scope="module")
async def module_api(module_settings: Settings) -> AsyncIterator[Api]:
    """The app with its lifespan running for the whole module: ask for `shared_api` instead."""
    async with open_api(module_settings) as opened:
        yield opened


@pytest.fixture
async def shared_api(module_api: Api, redis_url: str) -> AsyncIterator[Api]:
    """module_api, as a runtime opened for this test would be: on the empty Redis (redis_url),
    with the users file's accounts alone, nothing cached. The test must leave it idle: no stream
    still open, the event hub still connected."""
    runtime = module_api.runtime
    reset(runtime)
    if not runtime.hub.connected.is_set():
        await hub_listening(runtime)
    yield module_api
    await idle(runtime)


def reset(runtime: Runtime) -> None:
    """Put the runtime back where one opened on the emptied database (redis_url) starts: its
    accounts seeded from the users file (Runtime.open's open_ledger) and read, held in place of
    any reread a change of the previous test still has under way; no estimate cached. Everything
    else it holds lives in Redis, or in memory only while a request or a stream is open."""
    runtime.ledger.accounts.seed(Accounts.load(runtime.settings.users_file).all())
    runtime.accounts.put(runtime.ledger.accounts.snapshot())
    settings = runtime.settings
    runtime.estimator = Estimator(
        runtime.redis, runtime.clock, settings.heartbeat_seconds, settings.long_every
    )


async def idle(runtime: Runtime) -> None:
    """Fail unless every stream the test opened has ended within WAIT_S and the event hub is
    still connected; then follow the queues' moves afresh, so that no follower of the test's
    streams (one reads its queue's places once more at the next move) acts in the next test."""
    async with asyncio.timeout(WAIT_S):
        while runtime.hub.streams:
            await asyncio.sleep(0.001)  # polling a condition with a deadline
    assert runtime.hub.connected.is_set(), "the test left the event hub disconnected"
    await runtime.places.stop()
    runtime.places = Places(runtime.hub, runtime.queues)
    runtime.places.start()
