"""The Celery app's settings that follow from the service's own (app/wiring/celery_app.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings
from app.wiring.celery_app import create_celery
from app.worker.broker_check import consumer_timeout_problem
from tests.support import FIXTURES


@pytest.mark.parametrize("max_long_s", [3000, 20_000])
def test_the_visibility_timeout_outlasts_the_longest_job(max_long_s: float) -> None:
    settings = Settings(users_file=FIXTURES, max_long_s=max_long_s)
    app = create_celery(settings)
    try:
        timeout = app.conf.broker_transport_options["visibility_timeout"]
    finally:
        app.close()
    assert timeout == settings.broker_visibility_s > max_long_s


@pytest.mark.parametrize(
    ("raw", "queues"),
    [("short", ["short"]), ("long", ["long"]), (" short , long ", ["short", "long"])],
)
def test_worker_queues_is_a_list_read_from_a_comma_separated_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str, queues: list[str]
) -> None:
    monkeypatch.setenv("WORKER_QUEUES", raw)
    assert Settings(users_file=FIXTURES).worker_queues == queues


@pytest.mark.parametrize("raw", ["", "medium", "short,gpu", ","])
def test_an_unknown_or_empty_worker_queue_is_refused(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("WORKER_QUEUES", raw)
    with pytest.raises(ValidationError, match="worker_queues"):
        Settings(users_file=FIXTURES)


def test_on_rabbitmq_the_broker_is_celery_broker_url_without_heartbeats() -> None:
    url = "amqp://fairgpu:secret@rabbit:5672/fairgpu"
    settings = Settings(users_file=FIXTURES, celery_broker_url=url)
    app = create_celery(settings)
    try:
        conf = app.conf
        # a job blocks the worker's thread (solo pool): heartbeats would drop its connection
        assert (conf.broker_url, conf.broker_heartbeat) == (url, 0)
        assert conf.broker_transport_options["confirm_publish"] is True
    finally:
        app.close()
    on_redis = create_celery(Settings(users_file=FIXTURES))
    try:
        assert on_redis.conf.broker_url.startswith("redis://")
        assert on_redis.conf.broker_heartbeat != 0  # Celery's own default
    finally:
        on_redis.close()


@pytest.mark.parametrize(
    ("timeout_s", "drain_max_s", "max_long_s", "warned"),
    [
        (1800, 600, 3000, True),  # RabbitMQ's default is below the defaults' longest hold
        (7200, 600, 3000, False),
        (1800, 600, 1000, False),
        (1800, 0, 1795, True),  # the job's timeout and kill graces count too
    ],
)
def test_a_worker_on_rabbitmq_warns_when_consumer_timeout_is_below_a_trigger_s_hold(
    timeout_s: float, drain_max_s: float, max_long_s: float, warned: bool
) -> None:
    settings = Settings(
        users_file=FIXTURES,
        celery_broker_url="amqp://guest:guest@127.0.0.1:5672//",
        broker_consumer_timeout_s=timeout_s,
        drain_max_s=drain_max_s,
        max_long_s=max_long_s,
    )
    problem = consumer_timeout_problem(settings)
    assert (problem is not None) == warned
    if problem:
        assert f"{settings.longest_trigger_hold_s:g} s" in problem
    on_redis = Settings(users_file=FIXTURES, broker_consumer_timeout_s=1, drain_max_s=drain_max_s)
    assert consumer_timeout_problem(on_redis) is None  # Redis's visibility timeout is ours
