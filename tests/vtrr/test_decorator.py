"""@vtrr.task, VTRRTask.queue and the periodic reclaim task, without a worker process.

The Celery app's broker is the test server's db 1, so `.queue()` really publishes triggers.
Where a task must run, it runs in this process through `celery_task.apply()`. Celery registers a
decorated task with every app finalized later in the process; each test forgets its own.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, Task

from app.dev.redis_server import RedisServer
from app.vtrr import VTRRQueue, VTRRTask
from app.vtrr.celery_task import TASK_OPTIONS

BROKER_DB = 1


def make_app(server: RedisServer, main: str = "decorator-tests") -> Celery:
    app = Celery(main, broker=f"redis://127.0.0.1:{server.port}/{BROKER_DB}", set_as_current=False)
    app.conf.broker_connection_retry_on_startup = True
    return app


@pytest.fixture
def app(redis_server: RedisServer, redis_url: str) -> Iterator[Celery]:
    celery_app = make_app(redis_server)
    yield celery_app
    celery_app.close()


@pytest.fixture
def broker(redis_server: RedisServer, redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis(port=redis_server.port, db=BROKER_DB)
    yield client
    client.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_queue(r: redis.Redis, app: Celery, **options: Any) -> VTRRQueue:
    return VTRRQueue(r, app, name=unique("dec"), celery_queue=unique("cq"), **options)


@pytest.mark.parametrize("option", ["name", "queue", "ignore_result", "rate_limit", "bogus"])
def test_an_unknown_option_is_a_type_error(r: redis.Redis, app: Celery, option: str) -> None:
    vtrr = new_queue(r, app)
    with pytest.raises(TypeError, match=option):
        vtrr.task(**{option: 1})
    assert vtrr._task is None

    @vtrr.task  # the failed attempt left nothing behind
    def after_unknown_option(self: Task) -> None:
        pass

    assert vtrr._task is after_unknown_option


OPTION_VALUES: dict[str, Any] = {
    "max_retries": 5,
    "default_retry_delay": 7,
    "autoretry_for": (KeyError,),
    "retry_backoff": True,
    "retry_backoff_max": 60,
    "retry_jitter": False,
    "retry_kwargs": {"countdown": 1},
    "soft_time_limit": 5,
    "time_limit": 10,
    "acks_late": True,
    "reject_on_worker_lost": True,
}


def test_the_options_are_the_documented_ones() -> None:
    assert {"base", *OPTION_VALUES} == TASK_OPTIONS


@pytest.mark.parametrize(("option", "value"), OPTION_VALUES.items())
def test_every_documented_option_reaches_the_celery_task(
    r: redis.Redis, app: Celery, option: str, value: Any
) -> None:
    vtrr = new_queue(r, app)

    def optioned(self: Task) -> None:
        pass

    optioned.__name__ = optioned.__qualname__ = f"optioned_{option}"
    task = vtrr.task(**{option: value})(optioned)
    assert getattr(app.tasks[task.name], option) == value


def test_a_second_function_on_one_queue_is_a_value_error(r: redis.Redis, app: Celery) -> None:
    vtrr = new_queue(r, app)

    @vtrr.task
    def first_on_queue(self: Task) -> None:
        pass

    with pytest.raises(ValueError, match="one VTRRQueue per task"):

        @vtrr.task(max_retries=1)
        def second_on_queue(self: Task) -> None:
            pass

    assert vtrr._task is first_on_queue


def test_bare_decorator(r: redis.Redis, app: Celery, broker: redis.Redis) -> None:
    vtrr = new_queue(r, app)

    @vtrr.task
    def bare_decorated(self: Task, x: int) -> int:
        return x

    assert isinstance(bare_decorated, VTRRTask)
    assert bare_decorated.name == f"{__name__}.bare_decorated"
    assert app.tasks[bare_decorated.name].name == bare_decorated.name
    assert bare_decorated.queue("p", [{"args": [1]}]) and vtrr.length() == 1
    assert broker.llen(vtrr.celery_queue) == 1


def test_decorator_with_options(r: redis.Redis, app: Celery) -> None:
    after: list[str] = []

    class Base(app.Task):  # type: ignore[name-defined, misc]
        def after_return(self, status: str, *rest: Any) -> None:
            after.append(status)

    vtrr = new_queue(r, app)

    @vtrr.task(base=Base, max_retries=7, soft_time_limit=5, time_limit=10, acks_late=True)
    def with_options(self: Task, x: int) -> int:
        return x * 2

    task = app.tasks[with_options.name]
    assert isinstance(task, Base)
    assert (task.max_retries, task.soft_time_limit, task.time_limit) == (7, 5, 10)
    assert task.acks_late is True
    with_options.queue("p", [{"args": [21]}])
    assert with_options.celery_task.apply().get() == 42
    assert after == ["SUCCESS"]  # the base class's after_return still runs
    assert vtrr.stats()["acked"] == 1


def test_bind_false_still_binds(r: redis.Redis, app: Celery) -> None:
    vtrr = new_queue(r, app)
    seen: list[tuple[Any, ...]] = []

    @vtrr.task(bind=False)
    def bound_anyway(self: Task, x: int, *, y: int = 0) -> None:
        seen.append((self, self.request.vtrr_timeouts, x, y))

    [task_id] = bound_anyway.queue("p", [{"args": [1], "kwargs": {"y": 2}}])
    bound_anyway.celery_task.apply()
    [(self, timeouts, x, y)] = seen
    assert isinstance(self, Task)
    assert self.name == bound_anyway.name
    assert (timeouts, x, y) == (0, 1, 2)
    assert vtrr.stats()["acked"] == 1
    assert vtrr.pending() == vtrr.length() == 0
    assert not r.exists(vtrr.keys.item_key(task_id))


@pytest.mark.parametrize(
    ("error", "acked"),
    [(ValueError, True), (redis.ConnectionError, False), (redis.TimeoutError, False)],
)
def test_a_task_that_could_not_reach_redis_keeps_its_lease(
    r: redis.Redis, app: Celery, error: type[Exception], acked: bool
) -> None:
    vtrr = new_queue(r, app)

    @vtrr.task
    def unlucky(self: Task) -> None:
        raise error("raised by the task")

    [task_id] = unlucky.queue("p", [{}])
    result = unlucky.celery_task.apply()
    assert isinstance(result.result, error)
    # A plain failure is the function's answer: acked. An unreachable Redis says nothing about
    # the work: the lease stays, to expire and bring the item back.
    assert (vtrr.stats()["acked"], vtrr.pending()) == ((1, 0) if acked else (0, 1))
    assert bool(r.exists(vtrr.keys.item_key(task_id))) is not acked


@pytest.mark.parametrize(
    "bad",
    [
        {"args": [2], "priority": 3},
        {"args": [2], "partition_key": "q"},
        {"countdown": 1},
        {"args": "not-a-list"},
        {"kwargs": ["not", "a", "dict"]},
    ],
)
def test_a_bad_task_dict_is_a_type_error_and_queues_nothing(
    r: redis.Redis, app: Celery, broker: redis.Redis, bad: dict[str, Any]
) -> None:
    vtrr = new_queue(r, app)

    @vtrr.task
    def strict_fields(self: Task, x: int) -> None:
        pass

    with pytest.raises(TypeError):
        strict_fields.queue("p", [{"args": [1]}, bad, {"args": [3]}])
    assert vtrr.length() == 0
    assert vtrr.stats()["enqueued"] == 0
    assert broker.llen(vtrr.celery_queue) == 0
    assert r.get(vtrr.keys.triggers) is None


@pytest.mark.parametrize("weight", [0, -1, 1.5, True, "2"])
def test_a_bad_weight_is_a_value_error_and_queues_nothing(
    r: redis.Redis, app: Celery, broker: redis.Redis, weight: object
) -> None:
    vtrr = new_queue(r, app)

    @vtrr.task
    def weighed(self: Task) -> None:
        pass

    with pytest.raises(ValueError, match="weight"):
        weighed.queue("p", [{"weight": 2}, {"weight": weight}])
    assert (vtrr.length(), vtrr.stats()["enqueued"], broker.llen(vtrr.celery_queue)) == (0, 0, 0)


def test_reclaim_interval_registers_the_task_and_merges_the_beat_entry(
    r: redis.Redis, app: Celery, broker: redis.Redis
) -> None:
    existing = {"nightly": {"task": "tasks.nightly", "schedule": 86400.0}}
    app.conf.beat_schedule = dict(existing)
    name = unique("rec")
    vtrr = VTRRQueue(
        r, app, name=name, celery_queue=unique("cq"), reclaim_interval=30, reclaim_queue="maint"
    )
    task_name = f"vtrr_queue.reclaim.{name}"
    entry = {"task": task_name, "schedule": 30, "options": {"queue": "maint"}}
    assert vtrr.reclaim_task_name == task_name
    assert vtrr.reclaim_beat_schedule() == {task_name: entry}
    assert app.conf.beat_schedule == {**existing, task_name: entry}

    @vtrr.task(max_retries=0)
    def reclaimed_later(self: Task) -> None:
        pass

    # The registered task is reclaim_and_dispatch: it puts back lost triggers.
    reclaimed_later.queue("p", [{}, {}])
    broker.delete(vtrr.celery_queue)
    assert app.tasks[task_name].apply().get() == 2
    assert broker.llen(vtrr.celery_queue) == 2


def test_reclaim_queue_unset_sends_to_the_default_queue(r: redis.Redis, app: Celery) -> None:
    vtrr = new_queue(r, app, reclaim_interval=600.0)
    [entry] = vtrr.reclaim_beat_schedule().values()
    assert entry["options"] == {}
    assert entry["schedule"] == 600.0
    assert app.conf.beat_schedule == vtrr.reclaim_beat_schedule()


def test_no_reclaim_interval_no_beat_entry(r: redis.Redis, app: Celery) -> None:
    app.conf.beat_schedule = {"nightly": {"task": "tasks.nightly", "schedule": 86400.0}}
    vtrr = new_queue(r, app)
    assert vtrr.reclaim_beat_schedule() == {}
    assert vtrr.reclaim_task_name not in app.tasks
    assert app.conf.beat_schedule == {"nightly": {"task": "tasks.nightly", "schedule": 86400.0}}


def shared_work(self: Task, x: str) -> str:
    """Decorated by the queues of two apps in test_queues_on_two_apps_run_their_own_items."""
    return x


def test_queues_on_two_apps_run_their_own_items(
    redis_server: RedisServer, r: redis.Redis, broker: redis.Redis
) -> None:
    """Each VTRRQueue's celery_task runs its own queue's items, whatever other Celery apps the
    process holds (a test suite creating an app per test, a process serving two apps)."""
    apps = [make_app(redis_server, "first"), make_app(redis_server, "second")]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            queues = []
            for celery_app in apps:
                celery_app.finalize()  # e.g. celery's own pytest fixture hands one out finalized
                vtrr = new_queue(r, celery_app)
                queues.append((vtrr, vtrr.task(shared_work)))
        for vtrr, task in queues:
            task.queue("p", [{"args": [vtrr.name]}])
        results = [task.celery_task.apply().get() for _, task in queues]
        assert results == [vtrr.name for vtrr, _ in queues]
        assert [vtrr.stats()["acked"] for vtrr, _ in queues] == [1, 1]
        assert [str(w.message) for w in caught] == []
    finally:
        for celery_app in apps:
            celery_app.close()


def test_reclaim_tasks_on_two_apps_reclaim_their_own_queues(
    redis_server: RedisServer, redis_url: str, broker: redis.Redis
) -> None:
    """Two apps in one process, each with a queue named "files" (on Redis databases of their
    own): each app's vtrr_queue.reclaim.files runs its own queue's reclaim_and_dispatch."""
    apps = [make_app(redis_server, "first"), make_app(redis_server, "second")]
    clients = [redis.Redis(port=redis_server.port, db=db) for db in (2, 3)]
    try:
        queues = []
        for n, (celery_app, client) in enumerate(zip(apps, clients, strict=True), start=1):
            vtrr = VTRRQueue(
                client, celery_app, name="files", celery_queue=unique("cq"), reclaim_interval=60
            )

            def files_job(self: Task) -> None:
                pass

            files_job.__name__ = files_job.__qualname__ = unique("files_job").replace("-", "_")
            vtrr.task(files_job).queue("p", [{}] * n)  # n items, n triggers
            broker.delete(vtrr.celery_queue)  # lost: reclaim_and_dispatch sends n again
            queues.append(vtrr)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sent = [
                celery_app.tasks["vtrr_queue.reclaim.files"].apply().get() for celery_app in apps
            ]
        assert sent == [1, 2]
        assert [broker.llen(vtrr.celery_queue) for vtrr in queues] == [1, 2]
        assert [str(w.message) for w in caught] == []
    finally:
        for celery_app in apps:
            celery_app.close()
        for client in clients:
            client.close()
