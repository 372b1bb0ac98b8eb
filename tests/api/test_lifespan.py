"""The app's lifespan: it stops promptly whenever it is stopped."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from app.api.factory import create_app
from app.settings import Settings

pytestmark = pytest.mark.anyio
PROMPT_S = 1.0


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
        began = time.monotonic()
        # On timeout wait_for cancels the shutdown, whose `await task` cancels the hub task a
        # second time: that one lands, so the shutdown may end, late; measure how late.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(lifespan.__aexit__(None, None, None), PROMPT_S * 1.5)
        took = time.monotonic() - began
        assert took < PROMPT_S, f"shutdown {ticks} loop turns after start-up hung"
