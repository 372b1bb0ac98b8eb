"""Triggers pushed by the queue's own scripts when the broker is the queue's Redis.

The broker here is db 0 of the test server, the queue's own database, so the scripts may push.
A worker running such triggers is tested in test_celery_worker.py (its "pushed" cases).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, Task

from app.dev.redis_server import RedisServer
from app.vtrr import VTRRQueue
from app.vtrr.celery_queue import TRIGGER_MESSAGE_TTL_S
from app.vtrr.layout import TRIGGER_ID


def make_app(broker_url: str, **conf: Any) -> Celery:
    app = Celery(f"push-{uuid.uuid4().hex[:6]}", broker=broker_url, set_as_current=False)
    app.conf.update(broker_connection_retry_on_startup=True, **conf)
    return app


@pytest.fixture
def app(redis_server: RedisServer, redis_url: str) -> Iterator[Celery]:
    celery_app = make_app(f"redis://127.0.0.1:{redis_server.port}/0")
    yield celery_app
    celery_app.close()


def queue_on(r: redis.Redis, app: Celery, **options: Any) -> VTRRQueue:
    tag = uuid.uuid4().hex[:8]
    vtrr = VTRRQueue(r, app, f"push-{tag}", celery_queue=f"cq-{tag}", **options)

    def noop(self: Task) -> None:
        pass

    noop.__name__ = f"noop_{tag}"  # Celery names the task after it: one name per queue
    vtrr.task(noop)
    return vtrr


def messages(r: redis.Redis, vtrr: VTRRQueue) -> list[dict[str, Any]]:
    """The broker's list, oldest first (Kombu's workers BRPOP from the right)."""
    return [json.loads(raw) for raw in reversed(r.lrange(vtrr.celery_queue, 0, -1))]


def ids_of(message: dict[str, Any]) -> tuple[str, ...]:
    headers, properties = message["headers"], message["properties"]
    return (
        headers["id"],
        headers["root_id"],
        properties["correlation_id"],
        properties["delivery_tag"],
    )


def without_ids(message: dict[str, Any]) -> dict[str, Any]:
    copy = json.loads(json.dumps(message))
    for part, field in (
        ("headers", "id"),
        ("headers", "root_id"),
        ("properties", "correlation_id"),
        ("properties", "delivery_tag"),
    ):
        copy[part][field] = "<id>"
    return copy


def test_the_first_trigger_is_published_then_the_scripts_push_the_same_message(
    r: redis.Redis, app: Celery
) -> None:
    vtrr = queue_on(r, app, max_concurrency=3)
    message_key, broker_list = vtrr._trigger_keys()
    assert broker_list == vtrr.celery_queue
    assert not r.exists(message_key)

    vtrr._task.queue("A", [{"id": "a0"}])  # type: ignore[union-attr]
    # Nothing stored yet: Kombu published this one, and the message was stored for the scripts.
    assert r.exists(message_key)
    assert 0 < r.ttl(message_key) <= TRIGGER_MESSAGE_TTL_S
    vtrr._task.queue("A", [{"id": "a1"}, {"id": "a2"}])  # type: ignore[union-attr]

    published, *pushed = messages(r, vtrr)
    assert len(pushed) == 2
    assert TRIGGER_ID not in json.dumps(published)
    for message in pushed:
        assert without_ids(message) == without_ids(published)
        # One fresh id per trigger, used for its task id, root id, correlation id and tag.
        assert len(set(ids_of(message))) == 1
    assert len({ids_of(m)[0] for m in (published, *pushed)}) == 3
    assert int(r.get(vtrr.keys.triggers) or 0) == 3


def test_a_pushed_trigger_runs_the_fairest_item(r: redis.Redis, app: Celery) -> None:
    vtrr = queue_on(r, app, max_concurrency=1)
    vtrr._task.queue("A", [{"id": "a0"}, {"id": "a1"}])  # type: ignore[union-attr]
    delivery = vtrr._dequeue()  # what the published trigger's run does
    assert delivery is not None and delivery.task_id == "a0"
    # Its dequeue topped the triggers up from the script: the broker holds one more message.
    published, pushed = messages(r, vtrr)
    assert without_ids(pushed) == without_ids(published)
    assert pushed["headers"]["task"] == vtrr._task.name  # type: ignore[union-attr]


def test_a_lost_message_is_stored_again_by_the_next_publish(r: redis.Redis, app: Celery) -> None:
    vtrr = queue_on(r, app, max_concurrency=2)
    message_key = vtrr._trigger_keys()[0]
    vtrr._task.queue("A", [{"id": "a0"}])  # type: ignore[union-attr]
    r.delete(message_key)  # expired, or a Redis restarted without its data
    vtrr._task.queue("A", [{"id": "a1"}])  # type: ignore[union-attr]
    assert r.exists(message_key)
    assert len(messages(r, vtrr)) == 2


def test_reclaim_and_dispatch_counts_the_triggers_it_pushed(r: redis.Redis, app: Celery) -> None:
    vtrr = queue_on(r, app, max_concurrency=3)
    vtrr._task.queue("A", [{"id": f"a{i}"} for i in range(5)])  # type: ignore[union-attr]
    r.delete(vtrr.celery_queue)  # a purge
    assert vtrr.reclaim_and_dispatch() == 3
    assert len(messages(r, vtrr)) == 3


@pytest.mark.parametrize(
    ("broker", "pushes"),
    [
        ("redis://127.0.0.1:{port}/0", True),
        ("redis://127.0.0.1:{port}/1", False),  # another database
        ("redis://127.0.0.1:1/0", False),  # another server
        ("redis://localhost:{port}/0", False),  # not provably the same: no push
        ("memory://", False),
    ],
)
def test_the_scripts_push_only_onto_the_queue_s_own_redis(
    r: redis.Redis, redis_server: RedisServer, broker: str, pushes: bool
) -> None:
    app = make_app(broker.format(port=redis_server.port))
    try:
        vtrr = queue_on(r, app)
        message_key, broker_list = vtrr._trigger_keys()
        assert (broker_list == vtrr.celery_queue) is pushes
        assert (message_key != broker_list) is pushes
    finally:
        app.close()


def test_a_key_prefix_or_an_explicit_setting_decides(
    r: redis.Redis, redis_server: RedisServer, app: Celery
) -> None:
    prefixed = make_app(
        f"redis://127.0.0.1:{redis_server.port}/0",
        broker_transport_options={"global_keyprefix": "x:"},
    )
    try:
        vtrr = queue_on(r, prefixed)  # Kombu prefixes the list's key: published from Python
        assert vtrr._trigger_keys()[1] != vtrr.celery_queue
    finally:
        prefixed.close()
    off = queue_on(r, app, push_triggers=False)
    assert off._trigger_keys()[1] != off.celery_queue
    forced = queue_on(r, app, push_triggers=True)
    assert forced._trigger_keys()[1] == forced.celery_queue


def test_a_queue_with_no_task_yet_publishes_nothing_itself(r: redis.Redis, app: Celery) -> None:
    vtrr = VTRRQueue(r, app, f"push-{uuid.uuid4().hex[:8]}", celery_queue="cq-none")
    message_key, broker_list = vtrr._trigger_keys()
    assert message_key == broker_list  # the never-written key: no push
    assert vtrr._trigger_route is None  # decided again once the task exists


def test_put_back_tops_the_triggers_up_and_take_consumes_none(r: redis.Redis, app: Celery) -> None:
    """A preempted run's item is queued again, so a trigger is sent for it, as for a release;
    the owed item taken by name runs on the freed consumer, which consumed no trigger for it."""
    vtrr = queue_on(r, app, max_concurrency=2)
    vtrr._task.queue("A", [{"id": "a0"}])  # type: ignore[union-attr]
    delivery = vtrr._dequeue()  # the published trigger's run
    assert delivery is not None and int(r.get(vtrr.keys.triggers) or 0) == 0
    assert vtrr.put_back(delivery.task_id, delivery.token)
    assert int(r.get(vtrr.keys.triggers) or 0) == 1
    assert len(messages(r, vtrr)) == 2  # the first published, the second pushed
    assert vtrr.take("a0") is not None
    assert int(r.get(vtrr.keys.triggers) or 0) == 1
    assert len(messages(r, vtrr)) == 2
