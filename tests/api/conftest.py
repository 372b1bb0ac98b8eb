"""Fixtures of the API tests: the real app, its lifespan run, on the suite's real Redis."""

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


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, users_file=USERS_FILE)


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
    app = create_app(settings)
    base = "http://test"
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
