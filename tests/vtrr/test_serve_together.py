"""vtrr.serve_together: a trigger of one queue runs the item another queue's policy picks, with
that queue's function, and its lease is acked there."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pytest
import redis
from celery import Celery, Task

from app.dev.redis_server import RedisServer
from app.vtrr import VTRRQueue, serve_together
from tests.vtrr.test_decorator import make_app, new_queue


@pytest.fixture
def app(redis_server: RedisServer, redis_url: str) -> Iterator[Celery]:
    celery_app = make_app(redis_server, main="serve-together-tests")
    yield celery_app
    celery_app.close()


def test_a_trigger_runs_the_picked_queue_s_item_with_that_queue_s_function(
    r: redis.Redis, app: Celery
) -> None:
    a, b = new_queue(r, app), new_queue(r, app)
    ran: list[tuple[str, str, str]] = []

    @a.task
    def run_a(self: Task, x: str) -> None:
        ran.append(("a", x, self.request.vtrr_queue))

    @b.task
    def run_b(self: Task, x: str) -> None:
        ran.append(("b", x, self.request.vtrr_queue))

    class BFirst:
        def order(self, trigger: VTRRQueue) -> Sequence[VTRRQueue]:
            return [b, a]

        def took(self, queue: VTRRQueue | None, queued: Mapping[str, int]) -> None:
            pass

    serve_together([a, b], BFirst())
    run_a.queue("p", [{"args": ["a1"]}])
    run_b.queue("p", [{"args": ["b1"]}])
    run_a.celery_task.apply()  # a's trigger, b's item
    run_a.celery_task.apply()
    run_a.celery_task.apply()  # nothing left: a no-op
    assert ran == [("b", "b1", b.name), ("a", "a1", a.name)]
    assert (a.pending(), b.pending()) == (0, 0)
    assert (a.stats()["acked"], b.stats()["acked"]) == (1, 1)
