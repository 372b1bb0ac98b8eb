"""End-to-end fixtures: a whole stack of real processes (Redis, the API, Celery workers)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.dev.stack import Stack
from tests.support import DEMO_KEY, OTHER_KEY, fast_settings, wait_for


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """Start a stack (on its own embedded Redis) with n workers; stopped after the test."""
    stacks: list[Stack] = []

    def start(workers: int = 1, **overrides: object) -> Stack:
        stack = Stack(
            fast_settings(**overrides),
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


__all__ = ["DEMO_KEY", "OTHER_KEY", "wait_for"]
