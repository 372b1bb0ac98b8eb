"""What the process-level tests share: fast settings, demo keys, and polling with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from app.dev.redis_server import free_port
from app.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "users.json"
DEMO_KEY = "default_api_key"  # account 1111...
OTHER_KEY = "second_api_key"  # account 2222...
TEAM_KEY = "team_api_key"  # account 3333..., share 2
T = TypeVar("T")


def fast_settings(**overrides: object) -> Settings:
    """Settings with short leases, a fast reclaim and sweep, so recovery takes seconds."""
    base: dict[str, object] = {
        "users_file": FIXTURES,
        "port": free_port(),
        "lease_seconds": 2.0,
        "heartbeat_seconds": 0.5,
        "reclaim_interval_s": 0.5,
        "unqueued_grace_s": 2.0,
    }
    return Settings(**{**base, **overrides})  # type: ignore[arg-type]


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
    """Poll check() until it returns something truthy, or fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)  # polling a condition with a deadline
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
