"""Fixtures of the code tests: the asyncio loop for the store's async tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
