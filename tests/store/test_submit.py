"""A submit's record and its queue item in one call (app/store/submit.py, lua/submit.lua run as
the fair queue's hooks), on the suite's Redis: what a created job holds, and that a job the
queue refuses, or whose id is taken, writes nothing of itself."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio as aioredis

from app.settings import Settings
from app.store.keys import events_key, idempotency_key, input_key, job_key, owned_key, rate_key
from app.store.record import decode
from app.store.submit import NewJob
from app.vtrr import DuplicateTaskError, QueueFullError
from app.vtrr.keys import Keys
from tests.api.helpers import contents
from tests.store.support import write_job

pytestmark = pytest.mark.anyio
OWNER = "11111111-1111-1111-1111-111111111111"
JOB = "0b7d2f6e-0000-4000-8000-000000000002"
COUNTER = rate_key("digest", 1)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(settings.redis_url)
    yield client
    await client.aclose()


def new_job(job_id: str = JOB, key: str | None = "order-1") -> NewJob:
    once = None if key is None else (key, "fingerprint")
    webhook = "https://example.test/hook"
    return NewJob(job_id, "short", 2.0, job_type="vad", input_json='{"a":1}', webhook=webhook,
                  rate=(COUNTER, 10), once=once)  # fmt: skip


async def test_the_record_and_its_item_are_written_together(
    client: aioredis.Redis, settings: Settings, r: redis.Redis
) -> None:
    assert await write_job(client, settings, OWNER, new_job()) == (JOB, True)

    job = decode(r.hgetall(job_key(JOB)))
    assert {k: job[k] for k in ("task_id", "owner", "kind", "type", "status", "webhook")} == {
        "task_id": JOB,
        "owner": OWNER,
        "kind": "short",
        "type": "vad",
        "status": "PENDING",
        "webhook": "https://example.test/hook",
    }
    assert (job["duration_s"], job["attempts"]) == ("2.0", "0")
    assert r.get(input_key(JOB)) == b'{"a":1}'
    assert r.zscore(owned_key(OWNER), JOB) == float(job["enqueued_at"])
    assert r.xlen(events_key(JOB)) == 1
    assert r.get(idempotency_key(OWNER, "order-1")) == f"{JOB} fingerprint".encode()
    assert r.get(COUNTER) == b"1"
    assert r.exists(Keys.for_queue("short").item_key(JOB))
    assert 0 < r.ttl(job_key(JOB)) <= settings.job_ttl_s


async def test_a_job_the_queue_refuses_as_full_writes_nothing_but_its_count(
    client: aioredis.Redis, settings: Settings, r: redis.Redis
) -> None:
    await write_job(client, settings, OWNER, new_job("queued", key=None))
    before = {k: v for k, v in contents(r).items() if k != COUNTER.encode()}
    with pytest.raises(QueueFullError):
        await write_job(client, settings, OWNER, new_job(), max_queued=1)
    after = {k: v for k, v in contents(r).items() if k != COUNTER.encode()}
    assert after == before  # no record, no input, no event, no index entry, no idempotency key
    assert r.get(COUNTER) == b"2"


async def test_a_job_id_whose_record_exists_is_a_duplicate_and_writes_nothing_more(
    client: aioredis.Redis, settings: Settings, r: redis.Redis
) -> None:
    await write_job(client, settings, OWNER, new_job(key=None))
    before = contents(r)
    with pytest.raises(DuplicateTaskError):  # the long queue has no such item: the record says
        await write_job(client, settings, OWNER, NewJob(JOB, "long", 5.0))
    assert contents(r) == before
