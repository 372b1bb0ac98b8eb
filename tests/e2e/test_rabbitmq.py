"""RabbitMQ as Celery's broker (CELERY_BROKER_URL=amqp://...) while the fair queues stay in Redis:
whole stacks of real processes, on a vhost of the test's own on the machine's RabbitMQ (skipped,
with the reason, where none is reachable). The jobs' life of tests/e2e/test_jobs.py holds there
as on Redis: a job streams and is billed once, a light account is not starved, a killed worker's
job runs again billed once, a cancel stops a running job. And with a consumer_timeout too low for
a run (a broker node of the test's own, timeout 2 s), the broker closes the worker's channel
under the run, the worker exits and is started again, and still no job is lost, run twice or
billed twice."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from app.dev.stack import Stack
from tests.e2e import test_jobs as on_redis
from tests.e2e.test_jobs import bills, finished, status, submit
from tests.rabbitmq import NoRabbitError, machine_vhost, own_broker
from tests.support import DEMO_KEY, OTHER_KEY, fast_settings, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
MakeStack = Callable[..., Stack]


def stacks_on(broker: AbstractContextManager[str], tmp_path: Path) -> Iterator[MakeStack]:
    """Start stacks whose Celery broker is the broker's URL; all stopped before it goes."""
    try:
        url = broker.__enter__()
    except NoRabbitError as exc:
        pytest.skip(str(exc))
    started: list[Stack] = []

    def start(workers: int = 1, supervise: bool = False, **overrides: object) -> Stack:
        settings = fast_settings(celery_broker_url=url, **overrides)
        workdir = tmp_path / f"s{len(started)}"
        stack = Stack(
            settings, use_given_redis=False, workers=workers, workdir=workdir, supervise=supervise
        )
        stack.workdir.mkdir()
        started.append(stack)
        return stack.start()

    try:
        yield start
    finally:
        for stack in started:
            stack.stop()
        broker.__exit__(None, None, None)


@pytest.fixture
def on_rabbitmq(tmp_path: Path) -> Iterator[MakeStack]:
    """Stacks on a vhost of this test's own on the machine's RabbitMQ."""
    yield from stacks_on(machine_vhost(), tmp_path)


def test_a_job_streams_and_is_billed_once(on_rabbitmq: MakeStack) -> None:
    on_redis.test_job_streams_pending_started_success_and_is_billed_once(on_rabbitmq)


def test_the_light_account_is_not_starved(on_rabbitmq: MakeStack) -> None:
    on_redis.test_light_account_starts_before_the_heavy_accounts_fifth_job(on_rabbitmq)


def test_a_killed_worker_s_job_runs_again_billed_once(on_rabbitmq: MakeStack) -> None:
    on_redis.test_killed_worker_s_job_succeeds_on_another_with_one_bill(on_rabbitmq)


def test_a_cancel_stops_the_running_job(on_rabbitmq: MakeStack) -> None:
    on_redis.test_cancelling_a_running_job_stops_it_and_bills_the_time_it_ran(on_rabbitmq)


@pytest.fixture
def on_impatient_broker(tmp_path: Path) -> Iterator[MakeStack]:
    """Stacks on a broker of the test's own whose consumer_timeout is 2 s (checked twice a
    second), far below a run of the jobs below, and which asks for a heartbeat every second."""
    yield from stacks_on(own_broker(consumer_timeout_ms=2000), tmp_path)


def test_a_consumer_timeout_below_a_run_loses_no_job(on_impatient_broker: MakeStack) -> None:
    # supervised, as `fairgpu dev`, Compose (restart: unless-stopped) and Kubernetes run workers
    stack = on_impatient_broker(workers=1, broker_consumer_timeout_s=2, supervise=True)
    first = submit(stack, DEMO_KEY, duration_s=5)  # its trigger is held past the timeout
    second = submit(stack, OTHER_KEY, duration_s=0.5)

    for key, task_id in ((DEMO_KEY, first), (OTHER_KEY, second)):
        done = wait_for(lambda k=key, t=task_id: finished(stack, k, t), timeout=90, what=task_id)
        assert (done["status"], done["attempts"]) == ("SUCCESS", 1)  # ran once, to its end
        assert [b["task_id"] for b in bills(stack, key)] == [task_id]  # billed once

    # The broker closed the channel under the run: Celery takes that for an unrecoverable error
    # and the worker exits once the run is over; its supervisor starts it again.
    log_file = stack.log_dir / "cpu1.log"
    closed = "delivery acknowledgement on channel 1 timed out"
    wait_for(lambda: closed in log_file.read_text(errors="replace"), what="the channel's close")
    assert "BROKER_CONSUMER_TIMEOUT_S" in log_file.read_text()  # the warning at start
    # The broker asks for a heartbeat every second, and the run blocked the worker's thread for
    # 5 s: with heartbeats on, the broker would have dropped the connection (BROKER_HEARTBEAT 0).
    assert "Connection to broker lost" not in log_file.read_text()
    third = submit(stack, DEMO_KEY, duration_s=0.2)
    assert wait_for(lambda: finished(stack, DEMO_KEY, third), timeout=90)["status"] == "SUCCESS"
    assert log_file.read_text().count("cpu1@") >= 2  # it ran on the worker started again
    for key, task_id in ((DEMO_KEY, first), (OTHER_KEY, second)):
        assert status(stack, key, task_id)["attempts"] == 1  # the trigger's redelivery ran none
    assert sorted(b["task_id"] for b in bills(stack, DEMO_KEY)) == sorted([first, third])
