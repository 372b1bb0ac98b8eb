"""Fixtures of the webhook tests: settings on the suite's Redis with a secret, the store's two
sides on it (the API's JobStore, the workers' JobRecorder) to bring jobs to their end through
the real scripts, and a receiver on loopback."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from pydantic import SecretStr

from app.bill import Charge
from app.models import Status
from app.settings import Settings
from app.store import JobRecorder, JobStore
from app.store.keys import WEBHOOKS
from app.store.submit import NewJob
from tests.store.support import write_job
from tests.support import FIXTURES
from tests.webhooks.receiver import Receiver, receiving

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OWNER = "11111111-1111-1111-1111-111111111111"
OTHER = "22222222-2222-2222-2222-222222222222"
TOKEN = "lease-token"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        users_file=FIXTURES,
        redis_url=redis_url,
        webhook_secret=SecretStr(SECRET),
        webhook_allow_private=True,
    )


@dataclass
class Jobs:
    """Jobs brought to their end through the store's scripts, as the API and a worker do."""

    store: JobStore
    recorder: JobRecorder
    settings: Settings

    async def create(self, webhook: str | None, owner: str = OWNER) -> str:
        job_id = str(uuid.uuid4())
        job = NewJob(job_id, "short", 1.0, webhook=webhook)
        await write_job(self.store.redis, self.settings, owner, job)
        return job_id

    def start(self, job_id: str) -> bool:
        return self.recorder.start(job_id, TOKEN, "cpu@test", None).run

    def finish(self, job_id: str, status: Status, **fields: Any) -> bool:
        charge = Charge(
            cost_micros=500_000, description="Short GPU job", gpu_seconds=1.0, billed_ms=1000
        )
        return self.recorder.finish(job_id, TOKEN, status, charge=charge, owner=OWNER, **fields)

    def handed_over(self) -> list[str]:
        """The job ids on the deliveries stream, oldest first."""
        entries = self.recorder.redis.xrange(WEBHOOKS)
        return [fields[b"task_id"].decode() for _, fields in entries]


@pytest.fixture
async def jobs(settings: Settings, r: redis.Redis) -> AsyncIterator[Jobs]:
    client = aioredis.Redis.from_url(settings.redis_url)
    try:
        yield Jobs(JobStore(client, settings), JobRecorder(r, settings), settings)
    finally:
        await client.aclose()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from receiving()
