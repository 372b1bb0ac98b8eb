"""scripts/bench_limits.py runs its three variants on a Redis 7 and measures each one."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.dev.redis_server import RedisServer
from scripts.benchkit.limits_cost import VARIANTS, measure
from tests.vtrr.conftest import redis7_binary


def test_each_variant_is_measured_over_the_same_backlog(tmp_path: Path) -> None:
    binary = redis7_binary()
    if binary is None:
        pytest.skip("no Redis 7 on PATH: the benchmark reads FCALL's time")
    with RedisServer(tmp_path / "redis", binary=binary) as server:
        found = measure(server.url, rounds=1, items=20, partitions=2)
    assert set(found) == set(VARIANTS)
    assert all(len(values) == 1 and values[0] > 0 for values in found.values())
