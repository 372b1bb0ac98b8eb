"""GET /tasks (the caller's jobs, newest first, a page at a time) and GET /account (whose key it
is), against the real app and the suite's Redis."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
import redis

from app.api.live import listing
from app.dev.redis_server import RedisServer
from app.settings import Settings
from app.store.keys import job_key, owned_key
from tests.api.conftest import Api
from tests.api.helpers import (
    KEY,
    OWNER,
    SECOND,
    SECOND_KEY,
    SECOND_KEY_V2,
    TEAM,
    TEAM_KEY,
    UNAUTHORIZED,
    USERS_FILE,
    Untouched,
)

pytestmark = pytest.mark.anyio
Headers = dict[str, str]


@pytest.fixture(scope="module")
def module_settings(redis_server: RedisServer) -> Settings:
    """The suite's settings without the per-key rate limit: these tests submit dozens of jobs in
    a burst, and a 429 is not what they are about."""
    return Settings(redis_url=redis_server.url, users_file=USERS_FILE, rate_limit_per_s=0)


@pytest.fixture
def settings(module_settings: Settings, redis_url: str) -> Settings:
    return module_settings


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): a listing is read from Redis,
    emptied for each test."""
    return shared_api


async def submit(api: Api, key: Headers = KEY, kind: str = "short") -> str:
    response = await api.client.post(
        "/enqueue-task", json={"kind": kind, "duration_s": 3}, headers=key
    )
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


async def cancel(api: Api, task_id: str, key: Headers = KEY) -> None:
    response = await api.client.delete(f"/tasks/{task_id}", headers=key)
    assert response.status_code == 200, response.text


async def listed(api: Api, key: Headers = KEY, **params: Any) -> dict[str, Any]:
    """One page of GET /tasks, which must answer 200."""
    response = await api.client.get("/tasks", params=params, headers=key)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"tasks", "next_cursor"}
    return body


async def every_page(api: Api, key: Headers = KEY, **params: Any) -> list[list[str]]:
    """The ids of each page, following next_cursor until it is null (at most 200 pages)."""
    pages: list[list[str]] = []
    cursor = None
    for _ in range(200):
        page = await listed(api, key, **params, **({"cursor": cursor} if cursor else {}))
        pages.append([task["task_id"] for task in page["tasks"]])
        cursor = page["next_cursor"]
        if cursor is None:
            return pages
    raise AssertionError("next_cursor never became null")


def ids(page: dict[str, Any]) -> list[str]:
    return [task["task_id"] for task in page["tasks"]]


# -- order and pages ------------------------------------------------------------------------------
async def test_an_account_without_jobs_gets_an_empty_last_page(api: Api) -> None:
    assert await listed(api) == {"tasks": [], "next_cursor": None}


async def test_the_list_is_newest_first_with_each_jobs_status(api: Api) -> None:
    submitted = [await submit(api) for _ in range(4)]
    long_job = await submit(api, kind="long")

    page = await listed(api)
    assert ids(page) == [long_job, *reversed(submitted)]
    assert page["next_cursor"] is None
    times = [task["enqueued_at"] for task in page["tasks"]]
    assert times == sorted(times, reverse=True)
    # Each entry is the job's status as GET /task-status shows it.
    for task in page["tasks"]:
        one = await api.client.get(f"/task-status/{task['task_id']}", headers=KEY)
        assert task == one.json()
    assert {task["kind"] for task in page["tasks"]} == {"short", "long"}


@pytest.mark.parametrize(
    ("jobs", "limit"),
    [(1, 1), (5, 1), (6, 3), (7, 3), (12, 5), (12, 12), (12, 100)],
    ids=lambda v: str(v),
)
async def test_pages_followed_to_the_end_list_every_job_once(
    api: Api, jobs: int, limit: int
) -> None:
    submitted = [await submit(api) for _ in range(jobs)]

    pages = await every_page(api, limit=limit)
    flat = [task_id for page in pages for task_id in page]
    assert flat == list(reversed(submitted))  # none twice, none missed, newest first
    assert all(len(page) == limit for page in pages[:-1])
    assert 1 <= len(pages[-1]) <= limit


async def test_the_default_page_holds_twenty_jobs(api: Api) -> None:
    submitted = [await submit(api) for _ in range(21)]

    first = await listed(api)
    assert ids(first) == list(reversed(submitted))[:20]
    assert first["next_cursor"] is not None
    second = await listed(api, cursor=first["next_cursor"])
    assert second == {"tasks": second["tasks"], "next_cursor": None}
    assert ids(second) == [submitted[0]]


async def test_jobs_submitted_after_a_page_do_not_shift_the_next_one(api: Api) -> None:
    older = [await submit(api) for _ in range(4)]
    first = await listed(api, limit=2)
    newer = await submit(api)

    rest = await listed(api, limit=10, cursor=first["next_cursor"])
    assert ids(first) + ids(rest) == list(reversed(older))
    assert newer not in ids(rest)
    assert ids(await listed(api, limit=1)) == [newer]


# -- the status filter ----------------------------------------------------------------------------
async def test_the_status_filter_separates_pending_from_revoked(api: Api) -> None:
    jobs = [await submit(api) for _ in range(6)]
    revoked = jobs[1::2]
    for task_id in revoked:
        await cancel(api, task_id)
    pending = [task_id for task_id in jobs if task_id not in revoked]

    only_revoked = await listed(api, status="REVOKED")
    assert ids(only_revoked) == list(reversed(revoked))
    assert {task["status"] for task in only_revoked["tasks"]} == {"REVOKED"}
    only_pending = await listed(api, status="PENDING")
    assert ids(only_pending) == list(reversed(pending))
    assert [task["position"] for task in only_pending["tasks"]] == [2, 1, 0]
    assert await listed(api, status="SUCCESS") == {"tasks": [], "next_cursor": None}


async def test_filtered_pages_followed_to_the_end_hold_every_match_once(api: Api) -> None:
    jobs = [await submit(api) for _ in range(9)]
    revoked = [jobs[0], jobs[3], jobs[4], jobs[8]]
    for task_id in revoked:
        await cancel(api, task_id)

    pages = await every_page(api, status="REVOKED", limit=2)
    assert [task_id for page in pages for task_id in page] == list(reversed(revoked))


async def test_a_filtered_page_may_be_short_and_its_cursor_goes_on(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A page gives up after SCAN_MOST index entries; a small bound shows it with a few jobs.
    monkeypatch.setattr(listing, "SCAN_MOST", 3)
    oldest_revoked = await submit(api)
    await cancel(api, oldest_revoked)
    newer = [await submit(api) for _ in range(5)]  # PENDING, listed before the revoked one
    newest_revoked = await submit(api)
    await cancel(api, newest_revoked)

    first = await listed(api, status="REVOKED", limit=5)
    assert ids(first) == [newest_revoked]  # short: 1 of 5 in the first 3 entries
    assert first["next_cursor"] is not None
    second = await listed(api, status="REVOKED", limit=5, cursor=first["next_cursor"])
    assert ids(second) == []  # a page that found nothing within its bound, yet goes on
    assert second["next_cursor"] is not None
    third = await listed(api, status="REVOKED", limit=5, cursor=second["next_cursor"])
    assert third == {"tasks": third["tasks"], "next_cursor": None}
    assert ids(third) == [oldest_revoked]
    assert len(newer) == 5


@pytest.mark.parametrize("bad", ["DONE", "pending", ""])
async def test_an_unknown_status_is_a_422(api: Api, r: redis.Redis, bad: str) -> None:
    with Untouched(r):
        response = await api.client.get("/tasks", params={"status": bad}, headers=KEY)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/json"
    assert isinstance(response.json()["detail"], list)


# -- whose jobs -----------------------------------------------------------------------------------
async def test_only_the_callers_own_jobs_are_listed(api: Api) -> None:
    mine = [await submit(api, KEY) for _ in range(3)]
    theirs = [await submit(api, SECOND_KEY) for _ in range(2)]
    team = await submit(api, TEAM_KEY)

    assert ids(await listed(api, KEY, limit=100)) == list(reversed(mine))
    assert ids(await listed(api, SECOND_KEY, limit=100)) == list(reversed(theirs))
    assert ids(await listed(api, SECOND_KEY_V2, limit=100)) == list(reversed(theirs))
    assert ids(await listed(api, TEAM_KEY, limit=100)) == [team]


async def test_another_accounts_cursor_lists_only_the_callers_jobs(api: Api) -> None:
    mine = [await submit(api, KEY) for _ in range(3)]
    theirs = [await submit(api, SECOND_KEY) for _ in range(3)]
    their_cursor = (await listed(api, SECOND_KEY, limit=1))["next_cursor"]

    page = await listed(api, KEY, limit=100, cursor=their_cursor)
    assert set(ids(page)) <= set(mine)
    assert not set(ids(page)) & set(theirs)


# -- what the index holds -------------------------------------------------------------------------
async def test_a_job_whose_record_expired_leaves_the_list_and_the_index(
    api: Api, r: redis.Redis
) -> None:
    jobs = [await submit(api) for _ in range(3)]
    gone = jobs[1]
    r.delete(job_key(gone))

    assert ids(await listed(api)) == [jobs[2], jobs[0]]
    assert r.zscore(owned_key(OWNER), gone) is None
    assert r.zcard(owned_key(OWNER)) == 2


async def test_expired_records_across_a_page_boundary_are_skipped(api: Api, r: redis.Redis) -> None:
    jobs = [await submit(api) for _ in range(8)]
    expired = {jobs[6], jobs[5], jobs[2]}
    for task_id in expired:
        r.delete(job_key(task_id))

    pages = await every_page(api, limit=2)
    flat = [task_id for page in pages for task_id in page]
    assert flat == [t for t in reversed(jobs) if t not in expired]
    assert all(r.zscore(owned_key(OWNER), t) is None for t in expired)


# -- bad requests ---------------------------------------------------------------------------------
@pytest.mark.parametrize("limit", ["0", "101", "-1", "ten", "1.5", ""])
async def test_a_limit_outside_one_to_a_hundred_is_a_json_422(
    api: Api, r: redis.Redis, limit: str
) -> None:
    await submit(api)
    with Untouched(r):
        response = await api.client.get("/tasks", params={"limit": limit}, headers=KEY)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/json"
    [error] = response.json()["detail"]
    assert error["loc"] == ["query", "limit"]


@pytest.mark.parametrize("limit", [1, 100])
async def test_the_limit_bounds_are_accepted(api: Api, limit: int) -> None:
    await submit(api)
    assert len((await listed(api, limit=limit))["tasks"]) == 1


def b64(text: bytes) -> str:
    return base64.urlsafe_b64encode(text).decode()


BAD_CURSORS = {
    "garbage": "not-a-cursor",
    "bad padding": "abc",
    "padding only": "====",
    "base64 of words": b64(b"hello world"),
    "base64 of one word": b64(b"hello"),
    "base64 of three parts": b64(b"1.5 a b"),
    "base64 of a non-number": b64(b"one 6f1c2b1e-0000-4000-8000-000000000000"),
    "base64 of bad utf-8": b64(b"\xff\xfe\xfd 1"),
}


@pytest.mark.parametrize("cursor", BAD_CURSORS.values(), ids=BAD_CURSORS.keys())
async def test_a_cursor_this_server_did_not_give_is_a_json_422_that_writes_nothing(
    api: Api, r: redis.Redis, cursor: str
) -> None:
    await submit(api)
    with Untouched(r):
        response = await api.client.get("/tasks", params={"cursor": cursor}, headers=KEY)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/json"
    assert "detail" in response.json()


async def test_a_cursor_with_a_nan_score_is_a_json_422_that_writes_nothing(
    api: Api, r: redis.Redis
) -> None:
    await submit(api)
    cursor = b64(b"nan 6f1c2b1e-0000-4000-8000-000000000000")
    with Untouched(r):
        response = await api.client.get("/tasks", params={"cursor": cursor}, headers=KEY)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    "cursor", ["a" * 201, "has space", "semi;colon", "plus+slash/"], ids=["long", "sp", ";", "+/"]
)
async def test_a_cursor_outside_the_alphabet_or_too_long_is_a_422(
    api: Api, r: redis.Redis, cursor: str
) -> None:
    with Untouched(r):
        response = await api.client.get("/tasks", params={"cursor": cursor}, headers=KEY)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/json"


async def test_listing_needs_a_key(api: Api, r: redis.Redis) -> None:
    await submit(api)
    for headers in ({}, {"X-API-Key": "wrong_key"}):
        with Untouched(r):
            response = await api.client.get("/tasks", headers=headers)
        assert (response.status_code, response.json()) == (401, UNAUTHORIZED)


# -- GET /account ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "user_id", "share", "admin"),
    [
        (KEY, OWNER, 1.0, True),
        (SECOND_KEY, SECOND, 1.0, False),
        (SECOND_KEY_V2, SECOND, 1.0, False),
        (TEAM_KEY, TEAM, 2.0, False),
    ],
    ids=["admin", "second", "second-hashed-key", "team"],
)
async def test_the_account_says_whose_key_it_is(
    api: Api, key: Headers, user_id: str, share: float, admin: bool
) -> None:
    response = await api.client.get("/account", headers=key)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {
        "user_id", "description", "share", "admin", "run_scripts", "max_queued", "max_running",
        "max_held_gpu_seconds", "month",
    }  # fmt: skip
    assert (body["max_running"], body["max_held_gpu_seconds"]) == (None, None)  # no limits
    assert (body["user_id"], body["share"], body["admin"]) == (user_id, share, admin)
    assert isinstance(body["description"], str) and body["description"]
    assert body["max_queued"] == api.runtime.settings.max_queued_per_account
    # nothing billed yet, and no budget (the fixtures' accounts have none)
    month = body["month"]
    assert (month["billed_seconds"], month["cost_micros"], month["held_seconds"]) == (0, 0, 0)
    assert (month["budget_gpu_seconds"], month["left_gpu_seconds"]) == (None, None)


async def test_the_account_needs_a_key(api: Api, r: redis.Redis) -> None:
    for headers in ({}, {"X-API-Key": "wrong_key"}):
        with Untouched(r):
            response: httpx.Response = await api.client.get("/account", headers=headers)
        assert (response.status_code, response.json()) == (401, UNAUTHORIZED)
