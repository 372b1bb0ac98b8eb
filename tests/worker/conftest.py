"""The worker tests' fixtures."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.worker.support import Worker


@pytest.fixture
def worker(redis_url: str) -> Iterator[Callable[..., Worker]]:
    built: list[Worker] = []

    def make(**options: object) -> Worker:
        built.append(Worker(redis_url, **options))  # type: ignore[arg-type]
        return built[-1]

    yield make
    for w in built:
        w.service.close()
