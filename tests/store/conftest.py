"""Fixtures of the store's tests: asyncio, and the settings of the test's Redis."""

from __future__ import annotations

import pytest

from app.settings import Settings
from tests.api.helpers import USERS_FILE


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, users_file=USERS_FILE)
