"""A run lost with its worker, through real processes: its job is PENDING, with no worker, as
soon as its lapsed lease is reclaimed, and goes back to the front of its account's line, so an
account limited to one running job never shows two."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.store.keys import events_key, job_key
from tests.faults.conftest import DEMO_KEY, OTHER_KEY, USER_OF, Faults, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]


def short_name(worker: str) -> str:
    return worker.split("@", 1)[0]


def statuses(faults: Faults, task_id: str) -> list[dict[str, str]]:
    """The job's status events, in order, as its stream holds them (what the SSE streams
    send), without its progress and log events."""
    entries = faults.r.xrange(events_key(task_id))
    return [fields for _, fields in entries if "status" in fields]


def test_a_killed_worker_s_job_is_pending_with_no_worker_until_a_worker_starts_it_again(
    make_faults: Callable[..., Faults],
) -> None:
    faults = make_faults(workers=1)
    task_id = faults.submit(DEMO_KEY, kind="long", duration_s=8)
    first = wait_for(lambda: faults.started(DEMO_KEY, task_id), what="the first run")
    name = short_name(first["result"]["worker"])
    faults.stack.kill_worker(name)  # the only worker: nobody starts the job again meanwhile

    def pending() -> dict[str, Any] | None:
        state = faults.status(DEMO_KEY, task_id)
        return state if state["status"] == "PENDING" else None

    waiting = wait_for(pending, timeout=30, what="the job PENDING once its lease is reclaimed")
    assert waiting["attempts"] == 1  # the lost run is an attempt
    assert waiting["result"] is None or "worker" not in (waiting["result"] or {})
    assert waiting["waiting_for"] == "gpu"  # no worker alive: it waits for one, first in line
    listed = faults.call("GET", "/tasks", DEMO_KEY, params={"status": "PENDING"}, timeout=30)
    assert task_id in {job["task_id"] for job in listed.json()["tasks"]}
    record = faults.job(task_id)
    assert not {"worker", "token", "started_at"} & set(record)

    faults.stack.start_worker(name)
    done = wait_for(lambda: faults.finished(DEMO_KEY, task_id), timeout=60, what="the rerun")
    assert (done["status"], done["attempts"]) == ("SUCCESS", 2)
    assert [b["task_id"] for b in faults.bills(DEMO_KEY)] == [task_id]


def test_an_account_limited_to_one_running_job_never_shows_two_when_its_worker_dies(
    make_faults: Callable[..., Faults],
) -> None:
    """A lost run's job goes back to the front of its account's line: the other worker runs
    it again before the account's next job, which its limit holds back all along."""
    faults = make_faults(workers=2)
    other = USER_OF[OTHER_KEY]
    reply = httpx.patch(
        f"{faults.stack.url}/admin/accounts/{other}",
        headers={"X-API-Key": DEMO_KEY},
        json={"max_running": 1},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    first = faults.submit(OTHER_KEY, kind="long", duration_s=4)
    second = faults.submit(OTHER_KEY, kind="long", duration_s=1)
    started = wait_for(lambda: faults.started(OTHER_KEY, first), what="the first job's run")
    victim = short_name(started["result"]["worker"])
    faults.stack.kill_worker(victim)

    seen: list[tuple[str, str]] = []

    def both_ended() -> bool:
        # both records read at one instant (one transaction): two GETs in turn could see the
        # first job running, then the second started after the first had ended
        with faults.r.pipeline(transaction=True) as pipe:
            for task_id in (first, second):
                pipe.hget(job_key(task_id), "status")
            now = tuple(pipe.execute())
        seen.append(now)
        return all(s in ("SUCCESS", "FAILURE", "REVOKED") for s in now)

    deadline = time.monotonic() + 60
    while not both_ended():
        assert time.monotonic() < deadline, f"both jobs to end; seen {seen[-1]}"
    assert ("STARTED", "STARTED") not in seen, seen

    runs = [s for s in statuses(faults, first) if s["status"] == "STARTED"]
    assert len(runs) == 2  # the lost run, then the rerun
    lost_at = next(
        i
        for i, s in enumerate(statuses(faults, first))
        if s["status"] == "PENDING" and s.get("attempts") == "1"
    )
    assert "worker" not in statuses(faults, first)[lost_at]  # PENDING with no worker first
    rerun_at = float(runs[1]["started_at"])
    second_at = float(faults.status(OTHER_KEY, second)["result"]["started_at"])
    assert rerun_at < second_at  # the lost job first: its turn had come
    assert sorted(faults.billed_ids(OTHER_KEY)) == sorted([first, second])
