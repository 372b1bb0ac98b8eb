"""On RabbitMQ as Celery's broker (the fair queues in Redis), the lease a worker's tick claimed
to lead a job of several cards reaches that worker's own queue, "<name>.dq2", bound to the direct
exchange C.dq2, and no other worker's: the queue is declared as the lease is sent, so none is
lost to an exchange with no queue bound yet. On a vhost of the test's own on the machine's
RabbitMQ; skipped, with the reason, where none is reachable."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis
from amqp.exceptions import NotFound
from kombu import Connection

from app.vtrr.held import LEASE_KWARG
from tests.rabbitmq import NoRabbitError, machine_vhost
from tests.worker.test_gangs import Member, member, submit

pytestmark = pytest.mark.integration


@pytest.fixture
def amqp_url() -> Iterator[str]:
    vhost = machine_vhost()
    try:
        url = vhost.__enter__()
    except NoRabbitError as exc:
        pytest.skip(str(exc))
    try:
        yield url
    finally:
        vhost.__exit__(None, None, None)


def taken(url: str, m: Member) -> list[dict[str, object]]:
    """The kwargs of the messages in the worker's own queue, taken off it (a basic.get: the
    queue is used as Celery declared it)."""
    found = []
    with Connection(url) as connection:
        channel = connection.default_channel
        try:
            while (message := channel.basic_get(queue=f"{m.name}.dq2", no_ack=True)) is not None:
                found.append(json.loads(message.body)[1])  # [args, kwargs, embed]
        except NotFound:  # no queue: nothing was ever sent there (its worker declares it)
            pass
    return found


def test_the_claimed_lease_reaches_the_leaders_own_queue_on_rabbitmq(
    r: redis.Redis, redis_url: str, amqp_url: str
) -> None:
    first = member(redis_url, "w1@node-a", celery_broker_url=amqp_url)
    second = member(redis_url, "w2@node-a", celery_broker_url=amqp_url)
    try:
        submit(r, first, "G1", gpus=2)
        for _ in range(2):
            first.lends.tick()
            second.lends.tick()
        leader, lender = (first, second) if "G1" in first.runner.executor.led else (second, first)
        (held,) = taken(amqp_url, leader)
        assert held[LEASE_KWARG][:1] == ["G1"]
        assert taken(amqp_url, lender) == []
    finally:
        first.service.close()
        second.service.close()
