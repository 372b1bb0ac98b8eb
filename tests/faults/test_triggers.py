"""The broker's triggers lost behind the service's back, or delivered twice: every job runs, once.

REDIS_URL is both the state and Celery's broker: the Celery queues `short` and `long` are Redis
lists of trigger messages in the same database, which the tests edit directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from app.auth import Accounts
from app.wiring.service import build
from tests.faults.conftest import (
    DEMO_KEY,
    FAULT_WORKER,
    OTHER_KEY,
    TEAM_KEY,
    Faults,
    wait_for,
)

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]


def trigger_ids(faults: Faults, queue: str) -> list[str]:
    """The Celery message ids of the triggers waiting in a broker queue."""
    return [json.loads(m)["headers"]["id"] for m in faults.r.lrange(queue, 0, -1)]


def test_triggers_deleted_from_the_broker_are_restored_by_the_reclaim_and_every_job_runs(
    make_faults: Callable[..., Faults],
) -> None:
    faults = make_faults(workers=0)
    jobs = {
        DEMO_KEY: [faults.submit(DEMO_KEY, duration_s=0.2) for _ in range(3)],
        OTHER_KEY: [faults.submit(OTHER_KEY, duration_s=0.2) for _ in range(3)],
        TEAM_KEY: [faults.submit(TEAM_KEY, kind="long", duration_s=0.2) for _ in range(2)],
    }
    # At least one trigger per queued job. One more can come: a queue's first trigger is sent by
    # Kombu from a thread, and a reclaim round that reads the broker before it lands tops the
    # queue up by one (seen once in CI under load); an extra trigger finds nothing to lease. The
    # submits have all returned, so nothing is in flight any more when the broker is purged.
    sent = wait_for(
        lambda: (
            len(s := trigger_ids(faults, "short")) >= 6
            and len(lo := trigger_ids(faults, "long")) >= 2
            and {*s, *lo}
        ),
        what="one trigger per queued job",
    )

    assert faults.r.delete("short", "long") == 2  # the broker is purged behind our back

    restored = wait_for(
        lambda: (
            (len(s := trigger_ids(faults, "short")), len(lo := trigger_ids(faults, "long")))
            == (6, 2)
            and {*s, *lo}
        ),
        timeout=30,
        what="reclaim_and_dispatch to send the triggers again",
    )
    assert restored.isdisjoint(sent)  # new messages, not the old ones come back
    faults.stack.start_worker("cpu1")

    for key, task_ids in jobs.items():
        states = faults.wait_all(key, task_ids, timeout=60)
        assert {s["status"] for s in states.values()} == {"SUCCESS"}
        assert {s["attempts"] for s in states.values()} == {1}
        assert sorted(faults.billed_ids(key)) == sorted(task_ids)
    wait_for(faults.drained, timeout=10, what="both fair queues to empty")


def test_a_trigger_delivered_twice_runs_its_job_once(make_faults: Callable[..., Faults]) -> None:
    faults = make_faults(workers=0, worker_module=FAULT_WORKER)
    task_id = faults.submit(DEMO_KEY, duration_s=1.0)
    wait_for(lambda: faults.r.llen("short") == 1, what="the job's trigger")
    # The very same message delivered a second time...
    faults.r.lpush("short", faults.r.lindex("short", 0))  # type: ignore[arg-type]
    # ...and one more trigger published as the service publishes them.
    service = build(faults.stack.settings, Accounts.load(faults.stack.settings.users_file))
    try:
        service.tasks["short"].celery_task.apply_async(queue="short")
    finally:
        service.close()
    assert faults.r.llen("short") == 3
    faults.stack.start_worker("cpu1")
    faults.stack.start_worker("cpu2")  # so that two deliveries can run at the same time

    done = wait_for(lambda: faults.finished(DEMO_KEY, task_id), timeout=30, what="the job")
    wait_for(
        lambda: faults.r.llen("short") == 0 and faults.r.hlen("unacked") == 0,
        timeout=30,
        what="all three deliveries to be consumed",
    )

    # A worker writes a delivery's end to its log around the ack: wait for the third one too.
    def both_logs() -> str:
        return faults.stack.log_of("cpu1") + faults.stack.log_of("cpu2")

    wait_for(lambda: both_logs().count("succeeded in") >= 3, timeout=10, what="three ends logged")
    logs = both_logs()
    assert logs.count("run_short_job[") >= 3 * 2  # each delivery: received, then its end
    assert logs.count("succeeded in") == 3  # three deliveries ran...
    assert logs.count(": 'done'") == 1  # ...one of them ran the job

    assert done["status"] == "SUCCESS"
    assert done["attempts"] == 1
    assert len(faults.runs(task_id)) == 1
    assert faults.billed_ids(DEMO_KEY) == [task_id]
    assert [b["task_id"] for b in faults.bills(DEMO_KEY)] == [task_id]
    wait_for(faults.drained, timeout=10, what="the lease to be acked")
