"""Writes that must reach replicas: an enqueue (AsyncFairQueue(replicas=n)) returns once n replicas
have the write (Redis WAIT on the call's own connection), and raises NotReplicatedError when
fewer acknowledged it in time; a worker's step says how many replicas have the end it made; on
both engines, with real replicas."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis

from app.dev.processes import wait_until
from app.dev.redis_server import RedisServer
from app.vtrr import FairQueue, Item, NotReplicatedError
from app.vtrr.aio import AsyncFairQueue
from app.vtrr.replicated import until_replicated
from app.vtrr.step import Ending, Stepped, step
from tests.vtrr.conftest import ENGINES

#: A replica is a Redis process of its own, and the tests wait on replication: the
#: integration tier, where replicas and Sentinels run (docs/testing.md).
pytestmark = pytest.mark.integration


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


#: How long a WAIT that should succeed may take: it returns as soon as the replicas have the
#: write, so a loaded machine costs nothing here (one that must fail waits SHORT_MS).
ENOUGH_MS, SHORT_MS = 10_000, 100


def enqueue(url: str, replicas: int, ids: list[str], wait_ms: int = SHORT_MS) -> list[str]:
    async def call() -> list[str]:
        client = AsyncRedis.from_url(url)
        try:
            q = AsyncFairQueue(client, "replicated", replicas=replicas, replica_wait_ms=wait_ms)
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

    with replica_of(primary, tmp_path) as mirror:
        assert enqueue(primary.url, 1, ["copied"], ENOUGH_MS) == ["copied"]
        assert FairQueue(mirror, "replicated").has("copied")  # on the replica when answered
        with pytest.raises(NotReplicatedError, match="1 of 2 replicas"):
            enqueue(primary.url, 2, ["short"])


def test_a_step_says_how_many_replicas_have_the_end_it_made(
    primary: RedisServer, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(primary.url)
    q = FairQueue(client, "stepped", replicas=1)

    def ended(task_id: str, wait_ms: int = SHORT_MS) -> Stepped:
        q.enqueue("ann", [Item("x", id=task_id)])
        lease = q.dequeue()
        assert lease is not None
        ending = Ending(q, lease.task_id, lease.token)
        return step([q], ending=ending, lease_from=0, replicas=(1, wait_ms))

    alone = ended("alone")
    assert (alone.acked, alone.replicated) == (True, 0)  # ended on the primary, on no replica
    with replica_of(primary, tmp_path) as mirror:
        copied = ended("copied", ENOUGH_MS)
        assert (copied.acked, copied.replicated) == (True, 1)
        on_replica = FairQueue(mirror, "stepped")
        assert not on_replica.has("copied")  # its end is there: neither queued nor in flight
        # a repeat of the same step ends nothing, yet its WAIT still counts the replica
        lease = Ending(q, "copied", "no-longer-held")
        again = step([q], ending=lease, lease_from=0, replicas=(1, ENOUGH_MS))
        assert (again.acked, again.replicated) == (False, 1)


def test_a_put_back_returns_once_a_replica_has_the_item_queued_again(
    primary: RedisServer, tmp_path: Path
) -> None:
    """A preempted run's lease goes back in line replicated, as a step's end does."""
    client = redis.Redis.from_url(primary.url)
    with replica_of(primary, tmp_path) as mirror:
        q = FairQueue(client, "preempted", replicas=1)
        q.enqueue("ann", [Item("x", id="long")])
        lease = q.dequeue()
        assert lease is not None
        assert q.put_back("long", lease.token)
        on_replica = FairQueue(mirror, "preempted")
        assert (on_replica.length(), on_replica.pending()) == (1, 0)  # there when answered
        assert not q.put_back("long", lease.token)  # a stale token, replicated or not
    client.close()


def test_until_replicated_repeats_a_short_call_then_gives_up() -> None:
    counts = iter([0, 0, 1])
    made: list[int] = []

    def call() -> tuple[str, int]:
        made.append(1)
        return f"reply {len(made)}", next(counts)

    assert until_replicated(call, 1, patience_s=30) == "reply 1"  # the first reply stands
    assert len(made) == 3
    with pytest.raises(NotReplicatedError, match="0 of 2 replicas"):
        until_replicated(lambda: ("x", 0), 2, patience_s=0)


@contextmanager
def replica_of(primary: RedisServer, tmp_path: Path) -> Iterator[redis.Redis]:
    """A replica of the primary, synced, and a client on it."""
    of = ("--replicaof", "127.0.0.1", str(primary.port))
    replica = RedisServer(tmp_path / "replica", binary=primary.binary, extra=of).start()
    try:
        mirror = redis.Redis(port=replica.port)
        linked = lambda: mirror.info("replication").get("master_link_status") == "up"  # noqa: E731
        wait_until(linked, 30, "the replica to have synced")
        yield mirror
        mirror.close()
    finally:
        replica.stop()
