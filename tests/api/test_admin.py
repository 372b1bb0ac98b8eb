"""The operators' endpoints under /admin: hidden from everyone but admins, then the queues' view,
promote, release and drop, each against the real app, its fair queues and the suite's Redis."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import redis

from app import pricing
from app.models import Status
from app.worker.presence import Presence
from tests.api.conftest import Api
from tests.api.helpers import (
    KEY,
    OWNER,
    SECOND,
    SECOND_KEY,
    TEAM,
    TEAM_KEY,
    EventReader,
    Untouched,
)
from tests.support import bills_of

pytestmark = pytest.mark.anyio
Headers = dict[str, str]
HIDDEN = {"detail": "Not Found"}
NOT_ADMINS = {
    "non-admin key": SECOND_KEY,
    "team key": TEAM_KEY,
    "wrong key": {"X-API-Key": "no_such_key"},
    "empty key": {"X-API-Key": ""},
    "no key": {},
}


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): what an operator sees and does
    lives in Redis and the database, both emptied for each test."""
    return shared_api


async def submit(api: Api, key: Headers = KEY, kind: str = "short", duration_s: float = 5) -> str:
    response = await api.client.post(
        "/enqueue-task", json={"kind": kind, "duration_s": duration_s}, headers=key
    )
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


async def status_of(api: Api, task_id: str, key: Headers) -> dict[str, Any]:
    response = await api.client.get(f"/task-status/{task_id}", headers=key)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def start_run(api: Api, task_id: str, kind: str = "short") -> str:
    """Lease the fairest job of the queue as a worker would and mark it STARTED; its token."""
    lease = api.runtime.service.queues[kind].dequeue()  # type: ignore[index]
    assert lease is not None and lease.task_id == task_id, lease
    started = api.runtime.service.recorder.start(task_id, lease.token, "w", None)
    assert started.run, started.reason
    return lease.token


def shape(response: httpx.Response) -> tuple[int, Any, list[tuple[str, str]]]:
    """What a caller can tell apart: the status, the body and every header."""
    return response.status_code, response.json(), sorted(response.headers.multi_items())


# -- hidden from everyone else --------------------------------------------------------------------
Call = Callable[[Api, Headers, str], Awaitable[httpx.Response]]


async def _queues(api: Api, key: Headers, task_id: str) -> httpx.Response:
    return await api.client.get("/admin/queues", headers=key)


async def _promote(api: Api, key: Headers, task_id: str) -> httpx.Response:
    return await api.client.post(f"/admin/tasks/{task_id}/promote", headers=key)


async def _release(api: Api, key: Headers, task_id: str) -> httpx.Response:
    return await api.client.post(f"/admin/tasks/{task_id}/release", headers=key)


async def _drop(api: Api, key: Headers, task_id: str) -> httpx.Response:
    return await api.client.post("/admin/queues/short/drop", json={"confirm": "short"}, headers=key)


async def _drop_bad_body(api: Api, key: Headers, task_id: str) -> httpx.Response:
    return await api.client.post("/admin/queues/short/drop", content=b"{not json", headers=key)


async def _promote_bad_id(api: Api, key: Headers, task_id: str) -> httpx.Response:
    return await api.client.post("/admin/tasks/not-a-uuid/promote", headers=key)


async def _drop_unknown_queue(api: Api, key: Headers, task_id: str) -> httpx.Response:
    return await api.client.post("/admin/queues/medium/drop", json={"confirm": "x"}, headers=key)


ENDPOINTS: dict[str, Call] = {
    "GET queues": _queues,
    "POST promote": _promote,
    "POST release": _release,
    "POST drop": _drop,
    "POST drop, bad body": _drop_bad_body,
    "POST promote, bad id": _promote_bad_id,
    "POST drop, unknown queue": _drop_unknown_queue,
}


@pytest.mark.parametrize("key", NOT_ADMINS.values(), ids=NOT_ADMINS.keys())
@pytest.mark.parametrize("call", ENDPOINTS.values(), ids=ENDPOINTS.keys())
async def test_anyone_but_an_admin_sees_no_admin_endpoint_and_changes_nothing(
    api: Api, r: redis.Redis, key: Headers, call: Call
) -> None:
    queued = await submit(api, SECOND_KEY)
    running = await submit(api, SECOND_KEY)
    await submit(api, SECOND_KEY)
    start_run(api, queued)  # the fairest is leased: `queued` runs, the others wait
    unknown = await api.client.get("/admin/nothing", headers=key)
    assert (unknown.status_code, unknown.json()) == (404, HIDDEN)

    with Untouched(r):
        response = await call(api, key, running)
    assert shape(response) == shape(unknown)


@pytest.mark.parametrize("key", NOT_ADMINS.values(), ids=NOT_ADMINS.keys())
async def test_a_post_to_an_unknown_admin_path_looks_the_same_as_a_real_one(
    api: Api, r: redis.Redis, key: Headers
) -> None:
    unknown = await api.client.post("/admin/nothing", headers=key)
    with Untouched(r):
        real = await api.client.post("/admin/queues/long/drop", json={"confirm": "long"})
    assert shape(real) == shape(unknown) == shape(await api.client.get("/admin/nothing"))


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/admin/queues/short/drop"),
        ("POST", "/admin/queues"),
        ("GET", f"/admin/tasks/{uuid.UUID(int=1)}/promote"),
        ("DELETE", f"/admin/tasks/{uuid.UUID(int=1)}/release"),
    ],
)
async def test_a_wrong_method_on_an_admin_path_looks_like_an_unknown_path(
    api: Api, method: str, path: str
) -> None:
    unknown = await api.client.request(method, "/admin/nothing", headers=SECOND_KEY)
    response = await api.client.request(method, path, headers=SECOND_KEY)
    assert shape(response) == shape(unknown)


async def test_an_admin_gets_a_plain_404_for_an_unknown_admin_path(api: Api) -> None:
    response = await api.client.get("/admin/nothing", headers=KEY)
    assert (response.status_code, response.json()) == (404, HIDDEN)


# -- GET /admin/queues ----------------------------------------------------------------------------
async def queues(api: Api) -> dict[str, dict[str, Any]]:
    response = await api.client.get("/admin/queues", headers=KEY)
    assert response.status_code == 200, response.text
    return {q["name"]: q for q in response.json()["queues"]}


async def test_the_queues_view_of_empty_queues(api: Api) -> None:
    view = await queues(api)
    assert set(view) == {"short", "long"}
    for name, queue in view.items():
        assert queue == {
            "name": name,
            "queued": 0,
            "in_flight": 0,
            "workers": 0,
            "held_by_limit": 0,
            "fairness_lag_s": 0.0,
            "top_accounts": [],
            "stats": {
                "enqueued": 0,
                "dequeued": 0,
                "acked": 0,
                "reclaimed": 0,
                "cancelled": 0,
                "released": 0,
                "promoted": 0,
                "credited": 0,
            },
        }


async def test_the_queues_view_counts_queued_and_in_flight_and_ranks_accounts(api: Api) -> None:
    first = await submit(api, KEY)  # the fairest: leased below
    for _ in range(3):
        await submit(api, SECOND_KEY)
    for _ in range(2):
        await submit(api, TEAM_KEY)
    await submit(api, KEY)
    await submit(api, TEAM_KEY, kind="long", duration_s=100)
    start_run(api, first)
    cancelled = await submit(api, SECOND_KEY)
    assert (await api.client.delete(f"/tasks/{cancelled}", headers=SECOND_KEY)).status_code == 200

    view = await queues(api)
    short, long = view["short"], view["long"]
    assert (short["queued"], short["in_flight"], short["workers"]) == (6, 1, 0)
    assert short["top_accounts"] == [
        {"user_id": SECOND, "queued": 3, "held_by_limit": 0},
        {"user_id": TEAM, "queued": 2, "held_by_limit": 0},
        {"user_id": OWNER, "queued": 1, "held_by_limit": 0},
    ]
    assert short["stats"]["enqueued"] == 8
    assert short["stats"]["dequeued"] == 1
    assert short["stats"]["cancelled"] == 1
    assert short["fairness_lag_s"] >= 0
    assert (long["queued"], long["in_flight"]) == (1, 0)
    assert long["top_accounts"] == [{"user_id": TEAM, "queued": 1, "held_by_limit": 0}]
    assert long["stats"]["enqueued"] == 1


async def test_the_queues_view_says_how_many_queued_jobs_a_limit_holds_back(api: Api) -> None:
    """An idle pool beside queued jobs is explained: the account is at its max_running."""
    patched = await api.client.patch(
        f"/admin/accounts/{SECOND}", json={"max_running": 1}, headers=KEY
    )
    assert patched.status_code == 200, patched.text
    first = await submit(api, SECOND_KEY)
    for _ in range(2):
        await submit(api, SECOND_KEY)
    await submit(api, TEAM_KEY)
    start_run(api, first)
    short = (await queues(api))["short"]
    assert (short["queued"], short["held_by_limit"]) == (3, 2)
    assert short["top_accounts"] == [
        {"user_id": SECOND, "queued": 2, "held_by_limit": 2},
        {"user_id": TEAM, "queued": 1, "held_by_limit": 0},
    ]


async def test_the_queues_view_lists_at_most_ten_accounts(api: Api) -> None:
    view = (await queues(api))["short"]
    assert len(view["top_accounts"]) <= 10  # three demo accounts: the bound is in admin.py


# -- promote --------------------------------------------------------------------------------------
async def test_an_admin_promotes_another_accounts_job_to_the_front(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(2):
        await submit(api, KEY)
    theirs = [await submit(api, SECOND_KEY) for _ in range(3)]
    last = theirs[-1]
    assert (await status_of(api, last, SECOND_KEY))["position"] == 4

    caplog.set_level(logging.INFO, logger="app.api.routes.admin")
    response = await api.client.post(f"/admin/tasks/{last}/promote", headers=KEY)
    assert response.status_code == 200, response.text
    assert (response.json()["task_id"], response.json()["position"]) == (last, 0)
    assert response.json()["status"] == "PENDING"

    seen = await status_of(api, last, SECOND_KEY)
    assert (seen["status"], seen["position"]) == ("PENDING", 0)
    assert (await status_of(api, theirs[0], SECOND_KEY))["position"] > 0
    assert (await queues(api))["short"]["stats"]["promoted"] == 1

    [record] = [rec for rec in caplog.records if rec.name == "app.api.routes.admin"]
    assert record.levelno == logging.INFO
    assert record.account == OWNER  # type: ignore[attr-defined]
    assert record.task_id == last  # type: ignore[attr-defined]
    assert record.owner == SECOND  # type: ignore[attr-defined]


async def test_the_promoted_job_is_the_next_one_leased(api: Api) -> None:
    for _ in range(3):
        await submit(api, KEY)
    theirs = await submit(api, SECOND_KEY, kind="short")
    assert (await api.client.post(f"/admin/tasks/{theirs}/promote", headers=KEY)).status_code == 200

    lease = api.runtime.service.queues["short"].dequeue()
    assert lease is not None and lease.task_id == theirs


async def test_promoting_a_revoked_job_is_a_conflict(api: Api, r: redis.Redis) -> None:
    task_id = await submit(api, SECOND_KEY)
    assert (await api.client.delete(f"/tasks/{task_id}", headers=SECOND_KEY)).status_code == 200

    response = await api.client.post(f"/admin/tasks/{task_id}/promote", headers=KEY)
    assert (response.status_code, response.json()) == (409, {"detail": "the task is REVOKED"})


async def test_promoting_a_running_job_is_a_conflict(api: Api) -> None:
    task_id = await submit(api, SECOND_KEY)
    start_run(api, task_id)
    response = await api.client.post(f"/admin/tasks/{task_id}/promote", headers=KEY)
    assert (response.status_code, response.json()) == (409, {"detail": "the task is STARTED"})


@pytest.mark.parametrize("action", ["promote", "release"])
async def test_an_unknown_task_is_a_404_for_the_admin(api: Api, action: str) -> None:
    for task_id in (str(uuid.uuid4()), "not-a-uuid", str(uuid.uuid4()).upper()):
        response = await api.client.post(f"/admin/tasks/{task_id}/{action}", headers=KEY)
        assert (response.status_code, response.json()) == (404, {"detail": "task not found"})


# -- release --------------------------------------------------------------------------------------
async def test_releasing_a_running_jobs_lease_returns_it_to_the_front(
    api: Api, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    task_id = await submit(api, SECOND_KEY)
    waiting = await submit(api, TEAM_KEY)
    token = start_run(api, task_id)
    queue = api.runtime.service.queues["short"]
    assert (queue.pending(), queue.position(waiting)) == (1, 0)

    caplog.set_level(logging.INFO, logger="app.api.routes.admin")
    response = await api.client.post(f"/admin/tasks/{task_id}/release", headers=KEY)
    assert response.status_code == 200, response.text
    assert response.json()["task_id"] == task_id

    assert queue.pending() == 0  # the lease is gone
    assert not queue.extend(task_id, token)  # its token no longer holds it
    assert queue.position(task_id) == 0  # ahead of the job that was waiting
    assert queue.position(waiting) == 1
    assert queue.stats()["released"] == 1
    [record] = [rec for rec in caplog.records if rec.name == "app.api.routes.admin"]
    assert (record.account, record.task_id) == (OWNER, task_id)  # type: ignore[attr-defined]

    lease = queue.dequeue()  # the next free worker runs it again
    assert lease is not None and lease.task_id == task_id
    again = api.runtime.service.recorder.start(task_id, lease.token, "w2", None)
    assert (again.run, again.attempt) == (True, 2)


async def test_a_released_job_reads_pending_at_position_zero_to_its_owner(api: Api) -> None:
    task_id = await submit(api, SECOND_KEY)
    await submit(api, TEAM_KEY)
    old_token = start_run(api, task_id)

    response = await api.client.post(f"/admin/tasks/{task_id}/release", headers=KEY)
    assert response.status_code == 200, response.text
    assert (response.json()["status"], response.json()["position"]) == ("PENDING", 0)
    seen = await status_of(api, task_id, SECOND_KEY)
    assert (seen["status"], seen["position"]) == ("PENDING", 0)
    # The released run no longer holds the job: it cannot finish it.
    job = api.runtime.service.recorder.get(task_id)
    assert job is not None and job.token != old_token
    charge = pricing.price(api.runtime.settings, "short", 5)
    recorder = api.runtime.service.recorder
    assert not recorder.finish(task_id, old_token, Status.SUCCESS, charge=charge, owner=SECOND)
    assert (await status_of(api, task_id, SECOND_KEY))["status"] == "PENDING"


async def test_releasing_a_queued_job_is_a_conflict(api: Api, r: redis.Redis) -> None:
    task_id = await submit(api, SECOND_KEY)
    response = await api.client.post(f"/admin/tasks/{task_id}/release", headers=KEY)
    assert (response.status_code, response.json()) == (409, {"detail": "the task is PENDING"})
    assert api.runtime.service.queues["short"].position(task_id) == 0


async def test_releasing_an_ended_job_is_a_conflict(api: Api) -> None:
    task_id = await submit(api, SECOND_KEY)
    assert (await api.client.delete(f"/tasks/{task_id}", headers=SECOND_KEY)).status_code == 200
    response = await api.client.post(f"/admin/tasks/{task_id}/release", headers=KEY)
    assert (response.status_code, response.json()) == (409, {"detail": "the task is REVOKED"})


# -- drop -----------------------------------------------------------------------------------------
BAD_CONFIRMS = {
    "other queue": {"confirm": "long"},
    "wrong case": {"confirm": "SHORT"},
    "empty": {"confirm": ""},
    "missing": {},
    "extra field": {"confirm": "short", "force": True},
    "not a string": {"confirm": ["short"]},
}


@pytest.mark.parametrize("body", BAD_CONFIRMS.values(), ids=BAD_CONFIRMS.keys())
async def test_a_drop_without_the_right_confirm_is_a_422_and_drops_nothing(
    api: Api, r: redis.Redis, body: dict[str, Any]
) -> None:
    task_id = await submit(api, SECOND_KEY)
    response = await api.client.post("/admin/queues/short/drop", json=body, headers=KEY)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/json"
    assert (await status_of(api, task_id, SECOND_KEY))["status"] == "PENDING"
    assert api.runtime.service.queues["short"].length() == 1


@pytest.mark.parametrize("body", BAD_CONFIRMS.values(), ids=BAD_CONFIRMS.keys())
async def test_a_refused_drop_writes_nothing_to_redis(
    api: Api, r: redis.Redis, body: dict[str, Any]
) -> None:
    await submit(api, SECOND_KEY)
    with Untouched(r):
        response = await api.client.post("/admin/queues/short/drop", json=body, headers=KEY)
    assert response.status_code == 422, response.text


async def test_dropping_a_queue_revokes_its_queued_jobs_and_stops_its_running_one(
    api: Api, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    running = await submit(api, SECOND_KEY)
    mine = await submit(api, KEY)
    theirs = await submit(api, SECOND_KEY)
    team = await submit(api, TEAM_KEY)
    other_queue = await submit(api, SECOND_KEY, kind="long", duration_s=100)
    token = start_run(api, running)

    async with api.stream.stream(
        "GET", f"/task-status/stream/{theirs}", headers=SECOND_KEY
    ) as stream:
        assert stream.status_code == 200
        events = EventReader(stream)
        first = await events.next()
        assert first is not None and first.data["status"] == "PENDING"

        caplog.set_level(logging.INFO, logger="app.api.routes.admin")
        response = await api.client.post(
            "/admin/queues/short/drop", json={"confirm": "short"}, headers=KEY
        )
        assert response.status_code == 200, response.text
        assert response.json() == {"queue": "short", "dropped": 3, "stopped": 1}

        last = None
        while (event := await events.next()) is not None:
            last = event
        assert events.ended
        assert last is not None and last.data["status"] == "REVOKED"

    for task_id, key in ((mine, KEY), (theirs, SECOND_KEY), (team, TEAM_KEY)):
        seen = await status_of(api, task_id, key)
        assert (seen["status"], seen["position"]) == ("REVOKED", None)
    # the running one ends REVOKED at once, unbilled: an operator stopped it
    assert (await status_of(api, running, SECOND_KEY))["status"] == "REVOKED"
    assert (await status_of(api, other_queue, SECOND_KEY))["status"] == "PENDING"

    short = api.runtime.service.queues["short"]
    assert (short.length(), short.pending()) == (0, 0)
    assert (await queues(api))["long"]["queued"] == 1
    assert short.dequeue() is None

    [record] = [rec for rec in caplog.records if rec.name == "app.api.routes.admin"]
    assert record.levelno == logging.WARNING
    assert record.account == OWNER  # type: ignore[attr-defined]
    assert (record.queue, record.dropped, record.stopped) == ("short", 3, 1)  # type: ignore[attr-defined]

    # The stopped run can no longer end it, nor bill it.
    recorder = api.runtime.service.recorder
    charge = pricing.price(api.runtime.settings, "short", 1.0, end="cancelled")
    assert not recorder.finish(running, token, Status.REVOKED, charge=charge, owner=SECOND)
    assert (await status_of(api, running, SECOND_KEY))["status"] == "REVOKED"
    assert len(bills_of(r, SECOND)) == 0


async def test_the_queues_view_counts_jobs_in_flight_as_they_are_now(api: Api) -> None:
    task_id = await submit(api, SECOND_KEY)
    await status_of(api, task_id, SECOND_KEY)  # a queued job's status reads the queue's load
    start_run(api, task_id)

    short = (await queues(api))["short"]
    assert (short["queued"], short["in_flight"]) == (0, 1)


async def test_the_queues_view_counts_workers_as_they_are_now(api: Api, r: redis.Redis) -> None:
    task_id = await submit(api, SECOND_KEY)
    await status_of(api, task_id, SECOND_KEY)  # reads the load: no worker yet
    Presence(r, "gpu0@box", ["short"], api.runtime.settings.heartbeat_seconds).beat()

    assert (await queues(api))["short"]["workers"] == 1


async def test_the_queues_view_lists_each_worker_and_why_a_broken_one_stopped(
    api: Api, r: redis.Redis
) -> None:
    every = api.runtime.settings.heartbeat_seconds
    Presence(r, "gpu0@box", ["short"], every).busy(30)
    Presence(r, "gpu1@box", ["short", "long"], every).broken("CUDA error: unknown error")
    response = await api.client.get("/admin/queues", headers=KEY)
    assert response.status_code == 200
    workers = {w["name"]: w for w in response.json()["workers"]}
    assert set(workers) == {"gpu0@box", "gpu1@box"}
    busy, broken = workers["gpu0@box"], workers["gpu1@box"]
    assert (busy["queues"], busy["alive"], busy["broken"]) == (["short"], True, None)
    assert busy["busy_until"] > busy["last_seen"]
    assert (broken["alive"], broken["broken"]) == (False, "CUDA error: unknown error")
    assert (await queues(api))["long"]["workers"] == 0  # a broken worker serves nothing


async def test_dropping_an_empty_queue_drops_nothing(api: Api) -> None:
    response = await api.client.post(
        "/admin/queues/long/drop", json={"confirm": "long"}, headers=KEY
    )
    assert (response.status_code, response.json()) == (
        200,
        {"queue": "long", "dropped": 0, "stopped": 0},
    )


async def test_a_dropped_queue_takes_new_jobs_again(api: Api) -> None:
    await submit(api, SECOND_KEY)
    response = await api.client.post(
        "/admin/queues/short/drop", json={"confirm": "short"}, headers=KEY
    )
    assert response.status_code == 200
    fresh = await submit(api, SECOND_KEY)
    assert (await status_of(api, fresh, SECOND_KEY))["position"] == 0
