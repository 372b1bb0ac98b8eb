"""Fixtures of the API tests: the real app, its lifespan run, on the suite's real Redis.

Each test runs the app's lifespan, and so has a Runtime of its own (clients, event hub, rate
limiter) on its own empty database. The FastAPI object under it is lent from APPS and reused:
FastAPI builds a route's request validation the first time the route is called, several
milliseconds a route per app, which an app made per test paid again in every test.
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
from app.api.runtime import Runtime
from app.settings import Settings
from app.store.keys import job_channel
from tests.api.helpers import USERS_FILE, WAIT_S, StreamingASGITransport, Worker


@pytest.fixture
def anyio_backend() -> str:
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
