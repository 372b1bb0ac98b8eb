"""The estimated start of jobs held back by their account's limits: the account's jobs ahead are
walked in order (app/api/live/held.py), so each held job is told a start no sooner than the one
ahead of it ends, as its declared seconds go."""

from __future__ import annotations

import json
import time

import pytest

from app.api.live import held
from app.api.live.held import Walk, start_at
from app.store.keys import WORKERS
from tests.api.conftest import Api
from tests.api.helpers import KEY, SECOND, SECOND_KEY, Worker

pytestmark = pytest.mark.anyio


async def submit(api: Api, duration_s: float) -> str:
    response = await api.client.post(
        "/enqueue-task", json={"kind": "short", "duration_s": duration_s}, headers=SECOND_KEY
    )
    assert response.status_code == 200, response.text
    return str(response.json()["task_id"])


async def status(api: Api, task_id: str) -> dict[str, object]:
    response = await api.client.get(f"/task-status/{task_id}", headers=SECOND_KEY)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_held_jobs_of_a_max_running_1_account_start_one_after_another(
    api: Api, worker: Worker
) -> None:
    """Three jobs held behind a running one: each is told a later start than the one before,
    by at least that one's declared seconds (before the walk, all three were told the running
    job's end)."""
    patched = await api.client.patch(
        f"/admin/accounts/{SECOND}", json={"max_running": 1}, headers=KEY
    )
    assert patched.status_code == 200, patched.text
    durations = [4.0, 5.0, 7.0, 9.0]
    ids = [await submit(api, d) for d in durations]
    worker.start(ids[0], worker.lease())
    idle = {"queues": ["short"], "seen": time.time(), "busy_until": None}
    worker.client.hset(WORKERS, "cpu9@test", json.dumps(idle))  # a live, idle worker
    held = [await status(api, task_id) for task_id in ids[1:]]
    assert [s["waiting_for"] for s in held] == ["account_limit"] * 3
    starts = [s["estimated_start_at"] for s in held]
    assert all(isinstance(s, float) for s in starts), starts
    for before, after, seconds in zip(starts, starts[1:], durations[1:], strict=False):
        assert isinstance(before, float) and isinstance(after, float)
        assert after >= before + seconds, (starts, durations)


async def test_a_job_further_back_than_the_walk_is_told_the_mean_of_those_read(
    api: Api, worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a walk of 2, the fourth held job of 5 s is not read one by one: it is told three
    more runs of 5 s after the first held one's start, as the walk would have found."""
    monkeypatch.setattr(held, "WALK", 2)
    patched = await api.client.patch(
        f"/admin/accounts/{SECOND}", json={"max_running": 1}, headers=KEY
    )
    assert patched.status_code == 200, patched.text
    ids = [await submit(api, 5.0) for _ in range(5)]
    worker.start(ids[0], worker.lease())
    idle = {"queues": ["short"], "seen": time.time(), "busy_until": None}
    worker.client.hset(WORKERS, "cpu9@test", json.dumps(idle))
    starts = [(await status(api, task_id))["estimated_start_at"] for task_id in ids[1:]]
    assert all(isinstance(s, float) for s in starts), starts
    first, *_, last = starts
    assert isinstance(first, float) and isinstance(last, float)
    assert last == pytest.approx(first + 3 * 5.0, abs=0.01)


def test_a_held_job_starts_when_the_one_ahead_of_it_ends() -> None:
    walk = Walk(now=100.0, most_running=1, most_held_s=None, running_until=[104.0], ahead_s=[5.0])
    assert start_at(walk, own_s=7.0, not_before=100.0) == 109.0


def test_with_a_held_limit_the_next_job_starts_once_the_running_ones_ran_down_far_enough() -> None:
    """max_held_gpu_seconds 3 and jobs of 2 s: the second starts 1 s after the first, the third
    1 s after the second (the docs' example, walked)."""
    walk = Walk(now=0.0, most_running=None, most_held_s=3.0, running_until=[2.0], ahead_s=[2.0])
    assert start_at(walk, own_s=2.0, not_before=0.0) == pytest.approx(2.0)
    first = Walk(now=0.0, most_running=None, most_held_s=3.0, running_until=[2.0], ahead_s=[])
    assert start_at(first, own_s=2.0, not_before=0.0) == pytest.approx(1.0)


def test_a_job_longer_than_the_held_limit_starts_alone() -> None:
    walk = Walk(now=0.0, most_running=None, most_held_s=3.0, running_until=[2.0], ahead_s=[])
    assert start_at(walk, own_s=5.0, not_before=0.0) == 2.0


def test_the_queue_ahead_holds_the_accounts_first_job_back() -> None:
    walk = Walk(now=0.0, most_running=1, most_held_s=None, running_until=[], ahead_s=[3.0])
    assert start_at(walk, own_s=1.0, not_before=10.0) == 13.0


def test_jobs_further_back_than_the_walk_count_as_the_mean_of_those_read() -> None:
    """20 one-at-a-time jobs of 2 s read, 30 more unread: the job starts about 51 runs of 2 s
    after the first one read starts, not right after the last one read."""
    walk = Walk(
        now=0.0, most_running=1, most_held_s=None, running_until=[], ahead_s=[2.0] * 20, unread=30
    )
    assert start_at(walk, own_s=2.0, not_before=0.0) == pytest.approx(50 * 2.0)
    two = Walk(
        now=0.0, most_running=2, most_held_s=None, running_until=[], ahead_s=[2.0] * 4, unread=4
    )
    # 4 read, two at a time: the last one read starts at 2; then 4 more and this one, two at
    # a time, one mean run per two jobs
    assert start_at(two, own_s=2.0, not_before=0.0) == pytest.approx(2.0 + 5 * 2.0 / 2)
