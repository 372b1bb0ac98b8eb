"""What the process-level tests share: fast settings, demo keys, and polling with a deadline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from app.dev.processes import wait_until
from app.dev.redis_server import free_port
from app.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "users.json"
DEMO_KEY = "default_api_key"  # account 1111...
OTHER_KEY = "second_api_key"  # account 2222...
TEAM_KEY = "team_api_key"  # account 3333..., share 2
T = TypeVar("T")
#: The share of each property test's examples that a run generates: all of them in a whole run
#: (CI's, or any run of named files), UNIT_TIER_SHARE in the unit tier (-m "not integration" over
#: the whole tree), where a quick answer matters most. tests/conftest.py sets it before any test
#: module is imported; the assertions are the same in both.
examples_share = 1.0
UNIT_TIER_SHARE = 0.5


def examples(full: int) -> int:
    """The examples this run generates for a property test that generates `full` in a whole run."""
    return max(10, round(full * examples_share))


def fast_settings(**overrides: object) -> Settings:
    """Settings with short leases and a fast reclaim, so recovery takes seconds."""
    base: dict[str, object] = {
        "users_file": FIXTURES,
        "port": free_port(),
        "lease_seconds": 2.0,
        "heartbeat_seconds": 0.5,
        "reclaim_interval_s": 0.5,
    }
    return Settings(**{**base, **overrides})  # type: ignore[arg-type]


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
    """wait_until with the tests' default of 30 s: check()'s first truthy value, or the test
    fails with a TimeoutError."""
    value = wait_until(check, timeout, what)
    assert value is not None  # wait_until returns only a truthy value
    return value
