"""End-to-end fixtures: a whole stack of real processes (Redis, the API, Celery workers)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from app.devstack import Stack
from app.redis_server import free_port
from app.settings import Settings

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "users.json"
DEMO_KEY = "default_api_key"  # account 1111...
OTHER_KEY = "second_api_key"  # account 2222...
T = TypeVar("T")


def e2e_settings(**overrides: object) -> Settings:
    """Settings with short leases and a fast reclaim, so recovery takes seconds."""
    base: dict[str, object] = {
        "users_file": FIXTURES,
        "port": free_port(),
        "lease_seconds": 2.0,
        "heartbeat_seconds": 0.5,
        "reclaim_interval_s": 0.5,
    }
    return Settings(**{**base, **overrides})  # type: ignore[arg-type]


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """Start a stack (on its own embedded Redis) with n workers; stopped after the test."""
    stacks: list[Stack] = []

    def start(workers: int = 1, **overrides: object) -> Stack:
        stack = Stack(
            e2e_settings(**overrides),
            use_given_redis=False,
            workers=workers,
            workdir=tmp_path / f"stack{len(stacks)}",
        )
        stack.workdir.mkdir()
        stacks.append(stack)
        return stack.start()

    yield start
    for stack in stacks:
        stack.stop()


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
    """Poll check() until it returns something truthy, or fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)  # polling a condition with a deadline
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
