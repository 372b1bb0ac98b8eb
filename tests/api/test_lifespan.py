"""The app's lifespan: it stops promptly whenever it is stopped."""

from __future__ import annotations

import asyncio

import pytest

from app.api.factory import create_app
from app.settings import Settings

pytestmark = pytest.mark.anyio
#: Far above what a shutdown takes on a busy machine (milliseconds): one that has not ended by
#: then hangs (a hung one never ends by itself).
HUNG_S = 30.0


async def test_the_api_stops_promptly_however_soon_after_it_started(settings: Settings) -> None:
    """Stopping while the event hub is still connecting must not hang. (On Python 3.11 a
    cancellation that lands as redis-py's asyncio.wait_for completes is swallowed, and
    EventHub.stop() then waits for a hub task that listens on.)"""
    for ticks in range(30):
        app = create_app(settings)
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        for _ in range(ticks):
            await asyncio.sleep(0)  # let the hub get part of the way into connecting
        # Whether the shutdown ends by itself, not how fast (a limit of 1 s on it would make a
        # slow shutdown on a busy machine a failure): a hung one ends only as wait_for cancels it.
        try:
            await asyncio.wait_for(lifespan.__aexit__(None, None, None), HUNG_S)
        except TimeoutError:
            pytest.fail(f"shutdown {ticks} loop turns after start-up hung")
