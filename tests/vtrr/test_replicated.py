"""An enqueue that must reach replicas (AsyncFairQueue(replicas=n)): it returns once n replicas
have the write (Redis WAIT on the call's own connection), and raises NotReplicatedError when
fewer acknowledged it in time; on both engines, with real replicas."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis

from app.dev.processes import wait_until
from app.dev.redis_server import RedisServer
from app.vtrr import FairQueue, Item, NotReplicatedError
from app.vtrr.aio import AsyncFairQueue
from tests.vtrr.conftest import ENGINES


@pytest.fixture(params=sorted(ENGINES))
def primary(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RedisServer]:
    binary = ENGINES[request.param]
    if binary is None:
        pytest.skip("no Redis 7 on PATH: the functions engine is not tried here")
    # a replica's first sync starts at once (Redis 7 waits 5 s for others by default)
    quick = ("--repl-diskless-sync-delay", "0")
    server = RedisServer(tmp_path / "primary", binary=binary, extra=quick).start()
    yield server
    server.stop()


def enqueue(url: str, replicas: int, ids: list[str]) -> list[str]:
    async def call() -> list[str]:
        client = AsyncRedis.from_url(url)
        try:
            q = AsyncFairQueue(client, "replicated", replicas=replicas, replica_wait_ms=100)
            found, _ = await q.enqueue("ann", [Item("x", id=i) for i in ids])
            return found
        finally:
            await client.aclose()

    return asyncio.run(call())


def test_an_enqueue_waits_for_its_replicas_or_says_it_could_not(
    primary: RedisServer, tmp_path: Path
) -> None:
    with pytest.raises(NotReplicatedError, match="0 of 1 replicas"):
        enqueue(primary.url, 1, ["alone"])
    check = redis.Redis.from_url(primary.url)
    assert FairQueue(check, "replicated").has("alone")  # written all the same: retry idempotently

    of = ("--replicaof", "127.0.0.1", str(primary.port))
    replica = RedisServer(tmp_path / "replica", binary=primary.binary, extra=of).start()
    try:
        mirror = redis.Redis(port=replica.port)
        linked = lambda: mirror.info("replication").get("master_link_status") == "up"  # noqa: E731
        wait_until(linked, 30, "the replica to have synced")
        assert enqueue(primary.url, 1, ["copied"]) == ["copied"]
        assert FairQueue(mirror, "replicated").has("copied")  # on the replica when answered
        with pytest.raises(NotReplicatedError, match="1 of 2 replicas"):
            enqueue(primary.url, 2, ["short"])
    finally:
        replica.stop()
