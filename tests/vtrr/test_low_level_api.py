"""The low-level API as the vtrr-queue reference documents it: `_dequeue()` unpacks into six
values, and `ack(task_id, token)` ends the lease, with hooks or without; what a queue's hooks
return still reaches a trigger's run (held_lease), by another way than the delivery."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from celery import Celery, Task

from app.dev.redis_server import RedisServer
from app.vtrr import VTRRQueue, held_lease
from tests.vtrr.test_decorator import make_app, unique
from tests.vtrr.test_hooks import Recording


@pytest.fixture
def app(redis_server: RedisServer, redis_url: str) -> Iterator[Celery]:
    celery_app = make_app(redis_server, "low-level-tests")
    yield celery_app
    celery_app.close()


@pytest.mark.parametrize("hooked", [False, True], ids=["plain", "hooked"])
def test_dequeue_unpacks_into_the_six_values_of_the_reference(
    r: redis.Redis, app: Celery, hooked: bool
) -> None:
    hooks = Recording() if hooked else None
    vtrr = VTRRQueue(r, app, name=unique("low"), celery_queue=unique("cq"), hooks=hooks)

    @vtrr.task
    def convert(self: Task, path: str, dpi: int = 72) -> None:  # type: ignore[type-arg]
        pass

    convert.queue("user-1", [{"id": "t1", "args": ["a.pdf"], "kwargs": {"dpi": 300}}])

    dequeued = vtrr._dequeue()
    assert dequeued is not None
    task_name, args, kwargs, task_id, token, timeouts = dequeued  # the reference's own line

    assert (task_name, args, kwargs, task_id, timeouts) == (
        convert.name,
        ["a.pdf"],
        {"dpi": 300},
        "t1",
        0,
    )
    assert vtrr.ack(task_id, token) is True
    assert vtrr.pending() == 0 and vtrr._dequeue() is None


def test_what_the_hooks_lease_returns_reaches_the_items_run(r: redis.Redis, app: Celery) -> None:
    vtrr = VTRRQueue(r, app, name=unique("low"), celery_queue=unique("cq"), hooks=Recording())
    seen: list[object] = []

    @vtrr.task
    def work(self: Task) -> None:  # type: ignore[type-arg]
        lease = held_lease(self)
        assert lease is not None
        seen.append(lease.hooked)

    work.queue("user-1", [{"id": "t1"}])
    work.celery_task.apply()

    assert seen == [[b"started", b"t1"]]  # the suite's client answers bytes
