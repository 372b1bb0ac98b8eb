"""The sender process (`python -m app.webhooks`) against a receiver on loopback: a job's end,
brought about through the store's scripts, reaches the receiver as the job's status, signed so
that standardwebhooks verifies it; a receiver that fails gets the same delivery again, with the
same webhook-id, until it answers 2xx or the attempts run out; two senders share the work; one
account's slow receiver holds up no other account's webhook."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from app.dev import processes
from app.models import Status
from app.settings import Settings
from app.store.keys import METRICS, WEBHOOKS_ACCOUNTS
from app.webhooks.sender import ATTEMPT_S, CONCURRENCY
from tests.support import wait_for
from tests.webhooks.conftest import OTHER, SECRET, Jobs
from tests.webhooks.receiver import Receiver

pytestmark = [pytest.mark.integration, pytest.mark.anyio]
Start = Callable[..., None]
#: What a sender logs once SIGTERM stops it cleanly: with a secret, and without one.
READY = ("webhook sender started", "WEBHOOK_SECRET is not set")


@pytest.fixture
def start_sender(settings: Settings, tmp_path: Path) -> Iterator[Start]:
    """Start sender processes on the test's Redis; each is stopped (SIGTERM) after the test, and
    must have exited cleanly."""
    started = []

    def start(**env: str) -> None:
        environment = {
            **os.environ,
            "REDIS_URL": settings.redis_url,
            "WEBHOOK_SECRET": SECRET,
            "WEBHOOK_ALLOW_PRIVATE": "true",
            "LOG_FORMAT": "text",
            **env,
        }
        log = tmp_path / f"webhooks{len(started)}.log"
        argv = [sys.executable, "-m", "app.webhooks"]
        started.append((processes.spawn(argv, environment, log), log))
        # Ready means it handles SIGTERM: one stopped while still importing would die of it.
        wait_for(lambda: any(line in log.read_text() for line in READY), what="a sender ready")

    yield start
    for process, log in started:
        assert processes.stop(process) == 0, log.read_text()


def counted(r: redis.Redis, name: str, value: int) -> bool:
    return int(r.hget(METRICS, name) or 0) >= value


async def test_a_finished_jobs_status_arrives_signed(
    jobs: Jobs, receiver: Receiver, start_sender: Start, r: redis.Redis
) -> None:
    start_sender()
    job_id = await jobs.create(receiver.url)
    jobs.start(job_id)
    jobs.finish(job_id, Status.SUCCESS, output='{"accuracy": 0.97}')

    [delivery] = wait_for(lambda: receiver.got(1), what="the webhook")

    status = delivery.verified(SECRET)
    assert (status["task_id"], status["status"]) == (job_id, "SUCCESS")
    assert status["result"]["output"] == {"accuracy": 0.97}
    record = jobs.recorder.get(job_id)
    assert record is not None
    assert status == record.status_view().model_dump(mode="json")  # GET /task-status's body
    assert delivery.path == "/hook"
    assert delivery.headers["webhook-id"] == job_id
    assert delivery.headers["content-type"] == "application/json"
    assert delivery.headers["webhook-signature"].startswith("v1,")
    wait_for(lambda: counted(r, "webhooks_delivered", 1), what="the delivery counted")
    assert r.zcard(WEBHOOKS_ACCOUNTS) == 0  # nothing scheduled


async def test_a_failing_receiver_gets_retries_with_the_same_id(
    jobs: Jobs, start_sender: Start, r: redis.Redis
) -> None:
    start_sender()
    with Receiver(answers=[500, 500]) as flaky:
        job_id = await jobs.create(flaky.url)
        await jobs.store.revoke(job_id)

        deliveries = wait_for(lambda: flaky.got(3), what="three deliveries")

        assert [d.headers["webhook-id"] for d in deliveries] == [job_id] * 3
        assert all(d.verified(SECRET)["status"] == "REVOKED" for d in deliveries)
        wait_for(lambda: counted(r, "webhooks_delivered", 1), what="the delivery counted")
        assert int(r.hget(METRICS, "webhooks_failed") or 0) == 2
        assert len(flaky.deliveries) == 3  # acknowledged: no fourth


async def test_a_cancelled_queued_job_and_a_failed_job_get_their_webhooks(
    jobs: Jobs, receiver: Receiver, start_sender: Start
) -> None:
    start_sender()
    cancelled, failed = await jobs.create(receiver.url), await jobs.create(receiver.url)
    await jobs.store.revoke(cancelled)
    jobs.start(failed)
    jobs.finish(failed, Status.FAILURE, error="ValueError: boom")

    deliveries = wait_for(lambda: receiver.got(2), what="two webhooks")

    ends = {d.headers["webhook-id"]: d.verified(SECRET) for d in deliveries}
    assert ends[cancelled]["status"] == "REVOKED"
    assert ends[cancelled]["error_kind"] == "cancelled"
    assert ends[failed]["status"] == "FAILURE"
    assert ends[failed]["error"] == "ValueError: boom"


async def test_a_name_that_resolves_to_loopback_is_refused_at_each_attempt(
    jobs: Jobs, receiver: Receiver, start_sender: Start, r: redis.Redis, tmp_path: Path
) -> None:
    # The API resolves no name at submit: the sender's own check is what keeps a delivery out
    # of the network, at every attempt.
    start_sender(WEBHOOK_ALLOW_PRIVATE="false", WEBHOOK_MAX_ATTEMPTS="2")
    named = receiver.url.replace("127.0.0.1", "localhost")
    job_id = await jobs.create(named)
    await jobs.store.revoke(job_id)

    wait_for(lambda: counted(r, "webhooks_given_up", 1), what="the webhook given up")

    assert receiver.deliveries == []
    assert int(r.hget(METRICS, "webhooks_failed") or 0) == 2
    log = (tmp_path / "webhooks0.log").read_text()
    assert "the webhook's host localhost is at 127.0.0.1, a loopback address" in log


async def test_a_receiver_that_keeps_failing_is_given_up_after_the_last_attempt(
    jobs: Jobs, start_sender: Start, r: redis.Redis
) -> None:
    start_sender(WEBHOOK_MAX_ATTEMPTS="2")
    with Receiver(answers=[503] * 10) as down:
        job_id = await jobs.create(down.url)
        await jobs.store.revoke(job_id)

        wait_for(lambda: counted(r, "webhooks_given_up", 1), what="the webhook given up")

        assert len(down.deliveries) == 2
        assert int(r.hget(METRICS, "webhooks_failed") or 0) == 2
        assert r.zcard(WEBHOOKS_ACCOUNTS) == 0  # nothing scheduled


async def test_a_delivery_that_was_handed_over_before_the_sender_started_is_sent(
    jobs: Jobs, receiver: Receiver, start_sender: Start
) -> None:
    job_id = await jobs.create(receiver.url)
    await jobs.store.revoke(job_id)  # no sender yet: it waits on the stream

    start_sender()

    [delivery] = wait_for(lambda: receiver.got(1), what="the webhook")
    assert delivery.headers["webhook-id"] == job_id


async def test_two_senders_deliver_each_webhook_once(
    jobs: Jobs, receiver: Receiver, start_sender: Start, r: redis.Redis
) -> None:
    start_sender()
    start_sender()
    job_ids = [await jobs.create(receiver.url) for _ in range(20)]
    for job_id in job_ids:
        await jobs.store.revoke(job_id)

    wait_for(lambda: counted(r, "webhooks_delivered", 20), what="20 deliveries")

    assert sorted(d.headers["webhook-id"] for d in receiver.deliveries) == sorted(job_ids)


async def test_one_accounts_slow_receiver_leaves_slots_for_another_accounts_webhook(
    jobs: Jobs, receiver: Receiver, start_sender: Start, r: redis.Redis
) -> None:
    """Cancelling a queued job is free and still sends its webhook: 64 of them aimed at a
    receiver that does not answer must not keep another account's webhook waiting."""
    start_sender()
    with Receiver(hold=True) as slow:
        try:
            for _ in range(64):
                await jobs.store.revoke(await jobs.create(slow.url))
            wait_for(lambda: slow.got(CONCURRENCY // 2), what="the jammer's half of the slots")
            other = await jobs.create(receiver.url, owner=OTHER)
            await jobs.store.revoke(other)

            [delivery] = wait_for(lambda: receiver.got(1), ATTEMPT_S, "the other's webhook")

            # ...while every slow delivery was still under way: none had failed or timed out
            assert int(r.hget(METRICS, "webhooks_failed") or 0) == 0
            assert int(r.hget(METRICS, "webhooks_delivered") or 0) <= 1
            assert delivery.headers["webhook-id"] == other
            assert len(slow.deliveries) <= CONCURRENCY // 2  # the jammer held at most its share
        finally:
            slow.release()
        wait_for(lambda: counted(r, "webhooks_delivered", 65), what="every webhook")
    assert len(slow.deliveries) == 64


def test_a_sender_without_a_secret_waits_quietly_for_its_stop(
    start_sender: Start, tmp_path: Path
) -> None:
    start_sender(WEBHOOK_SECRET="")
    wait_for(lambda: "sends no webhooks" in (tmp_path / "webhooks0.log").read_text(), what="log")
