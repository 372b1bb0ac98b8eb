"""The asyncio twin of app.dev.processes.wait_until, for the benchmarks that wait on jobs from
inside an event loop (where a blocking sleep would stall the other submitters)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from app.dev.processes import POLL_S

T = TypeVar("T")


async def until(
    check: Callable[[], Awaitable[T | None]], timeout: float, what: str, every: float = POLL_S
) -> T:
    """Await check() until it returns something truthy, and return that; TimeoutError naming
    `what` once timeout seconds have passed (math.inf: wait as long as it takes)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not ready within {timeout:g} s")
        await asyncio.sleep(every)  # polling a condition with a deadline
