"""vtrr.held_lease: the typed view of the lease a @vtrr.task run holds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from celery import Celery, Task

from app.dev.redis_server import RedisServer
from app.vtrr import HeldLease, held_lease
from tests.vtrr.test_decorator import make_app, new_queue


@pytest.fixture
def app(redis_server: RedisServer, redis_url: str) -> Iterator[Celery]:
    celery_app = make_app(redis_server, main="held-lease-tests")
    yield celery_app
    celery_app.close()


def test_a_run_sees_the_lease_it_holds_and_acks_with_it(r: redis.Redis, app: Celery) -> None:
    vtrr = new_queue(r, app)
    seen: list[HeldLease | None] = []

    @vtrr.task
    def job(self: Task) -> None:
        seen.append(held_lease(self))

    [task_id] = job.queue("p", [{}])
    job.celery_task.apply()

    [lease] = seen
    assert lease is not None
    assert (lease.task_id, lease.timeouts) == (task_id, 0)
    assert len(lease.token) == 32  # the dequeue's token, which the ack was fenced by
    assert vtrr.stats()["acked"] == 1


def test_outside_a_fair_queue_run_there_is_no_lease(app: Celery) -> None:
    @app.task(bind=True, shared=False)
    def plain(self: Task) -> HeldLease | None:
        return held_lease(self)

    assert plain.apply().get() is None
