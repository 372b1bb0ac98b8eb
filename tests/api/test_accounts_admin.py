"""Accounts and keys without a restart: admins open accounts, issue and revoke keys, change
shares and quotas, disable accounts, and read the audit log; every API process sees a change at
once (a revoked key is refused by the other process too)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.settings import Settings
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, OWNER, SECOND, SECOND_KEY, UNAUTHORIZED, WAIT_S

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): accounts, keys and the audit live
    in the database, emptied and seeded again for each test."""
    return shared_api


async def admin(api: Api, method: str, path: str, expect: int = 200, **kwargs: Any) -> Any:
    response = await api.client.request(method, f"/admin{path}", headers=KEY, **kwargs)
    assert response.status_code == expect, response.text
    return response.json()


async def status_with(api: Api, key: str) -> int:
    return (await api.client.get("/account", headers={"X-API-Key": key})).status_code


async def test_an_account_opened_and_given_a_key_can_act_and_its_revoked_key_cannot(
    api: Api,
) -> None:
    made = await admin(
        api, "POST", "/accounts", 201, json={"user_id": "carol", "description": "Carol's lab"}
    )
    assert (made["user_id"], made["share"], made["keys"], made["disabled"]) == (
        "carol",
        1.0,
        0,
        False,
    )

    issued = await admin(api, "POST", "/accounts/carol/keys", 201, json={"label": "laptop"})
    key = issued["key"]
    assert key.startswith("fg_") and issued["id"] and issued["label"] == "laptop"
    assert await status_with(api, key) == 200
    listed = await admin(api, "GET", "/accounts/carol/keys")
    assert [(k["id"], k["revoked_at"]) for k in listed] == [(issued["id"], None)]
    assert key not in str(listed)  # kept as a digest only

    revoked = await admin(api, "DELETE", f"/keys/{issued['id']}")
    assert revoked["revoked_at"] is not None
    response = await api.client.get("/account", headers={"X-API-Key": key})
    assert (response.status_code, response.json()) == (401, UNAUTHORIZED)
    assert (await admin(api, "GET", "/accounts/carol"))["keys"] == 0


async def test_every_change_is_in_the_audit_log_with_who_made_it(api: Api) -> None:
    await admin(api, "POST", "/accounts", 201, json={"user_id": "dan"})
    issued = await admin(api, "POST", "/accounts/dan/keys", 201)
    await admin(api, "PATCH", "/accounts/dan", json={"share": 2.5, "max_queued": 7})
    await admin(api, "DELETE", f"/keys/{issued['id']}")

    entries = await admin(api, "GET", "/audit?limit=4")
    assert [e["action"] for e in entries] == [
        "key.revoke",
        "account.update",
        "key.issue",
        "account.create",
    ]
    assert {e["actor"] for e in entries} == {OWNER}
    assert {e["target"] for e in entries} == {"dan"}
    update = entries[1]["detail"]
    assert update["before"] == {"share": 1.0, "max_queued": None}
    assert update["after"] == {"share": 2.5, "max_queued": 7}
    older = await admin(api, "GET", f"/audit?before={entries[1]['id']}&limit=10")
    assert [e["action"] for e in older][:2] == ["key.issue", "account.create"]


async def test_a_disabled_account_cannot_act_until_it_is_enabled(api: Api) -> None:
    await admin(api, "PATCH", f"/accounts/{SECOND}", json={"disabled": True})
    assert (await api.client.get("/account", headers=SECOND_KEY)).status_code == 401
    await admin(api, "PATCH", f"/accounts/{SECOND}", json={"disabled": False})
    assert (await api.client.get("/account", headers=SECOND_KEY)).status_code == 200


async def test_a_quota_changed_live_applies_to_the_next_submit(api: Api) -> None:
    await admin(api, "PATCH", f"/accounts/{SECOND}", json={"max_queued": 1})
    body = {"kind": "short", "duration_s": 1}
    first = await api.client.post("/enqueue-task", json=body, headers=SECOND_KEY)
    second = await api.client.post("/enqueue-task", json=body, headers=SECOND_KEY)
    assert first.status_code == 200
    assert second.status_code == 429
    assert second.json()["detail"] == "this account already has 1 jobs queued in short"
    await admin(api, "PATCH", f"/accounts/{SECOND}", json={"max_queued": None})  # the default
    again = await api.client.post("/enqueue-task", json=body, headers=SECOND_KEY)
    assert again.status_code == 200


async def test_a_new_share_moves_the_accounts_queued_jobs_at_once(api: Api) -> None:
    """Equal jobs, shares 1:1, submitted in turn: the first four in line are two of each.
    With the second account's share at 4, its later jobs move up: three of the first four (its
    first job keeps its place; the others follow it a quarter of a job apart)."""
    body = {"kind": "short", "duration_s": 5}
    owners: dict[str, str] = {}
    for key, owner in [(KEY, OWNER), (SECOND_KEY, SECOND)] * 4:
        response = await api.client.post("/enqueue-task", json=body, headers=key)
        owners[response.json()["task_id"]] = owner
    queue = api.runtime.service.queues["short"]

    def seconds_among_first_four() -> int:
        ids = list(owners)
        ranked = sorted(zip(queue.positions(ids), ids, strict=True), key=lambda p: p[0] or 0)
        return [owners[task_id] for _, task_id in ranked[:4]].count(SECOND)

    before = await asyncio.to_thread(seconds_among_first_four)
    changed = await admin(api, "PATCH", f"/accounts/{SECOND}", json={"share": 4})
    assert changed["share"] == 4.0
    after = await asyncio.to_thread(seconds_among_first_four)
    assert (before, after) == (2, 3)


async def test_changes_are_refused_clearly_and_change_nothing(api: Api) -> None:
    await admin(api, "POST", "/accounts", 201, json={"user_id": "erin"})
    await admin(api, "POST", "/accounts", 409, json={"user_id": "erin"})
    await admin(api, "PATCH", "/accounts/nobody", 404, json={"share": 2})
    await admin(api, "POST", "/accounts/nobody/keys", 404)
    await admin(api, "DELETE", "/keys/00000000", 404)
    await admin(api, "PATCH", "/accounts/erin", 422, json={"share": 0})
    await admin(api, "PATCH", "/accounts/erin", 422, json={"share": None})
    await admin(api, "PATCH", "/accounts/erin", 422, json={"colour": "blue"})
    await admin(api, "POST", "/accounts", 422, json={"user_id": "no spaces"})
    assert (await admin(api, "GET", "/accounts/erin"))["share"] == 1.0
    entries = await admin(api, "GET", "/audit")
    assert [e["action"] for e in entries if e["target"] == "erin"] == ["account.create"]


async def test_admin_endpoints_are_hidden_from_other_accounts(api: Api) -> None:
    for method, path in [("GET", "/admin/accounts"), ("POST", "/admin/accounts/x/keys")]:
        response = await api.client.request(method, path, headers=SECOND_KEY)
        assert (response.status_code, response.json()) == (404, {"detail": "Not Found"})


async def test_a_revoked_key_is_refused_by_every_api_process(settings: Settings) -> None:
    """Two API processes (two apps, each with its own accounts in memory): a key revoked
    through one is refused by the other as soon as it has heard of the change."""
    async with open_api(settings) as first, open_api(settings) as second:
        await admin(first, "POST", "/accounts", 201, json={"user_id": "fay"})
        key = (await admin(first, "POST", "/accounts/fay/keys", 201))["key"]
        async with asyncio.timeout(WAIT_S):
            while await status_with(second, key) != 200:  # the other process hears of it
                await asyncio.sleep(0.01)
        key_id = (await admin(first, "GET", "/accounts/fay/keys"))[0]["id"]
        await admin(first, "DELETE", f"/keys/{key_id}")
        async with asyncio.timeout(WAIT_S):
            while await status_with(second, key) != 401:
                await asyncio.sleep(0.01)
        assert await status_with(first, key) == 401


async def test_limits_are_set_at_opening_changed_cleared_and_audited(api: Api) -> None:
    made = await admin(
        api, "POST", "/accounts", 201,
        json={"user_id": "gil", "max_running": 2, "max_held_gpu_seconds": 600},
    )  # fmt: skip
    assert (made["max_running"], made["max_held_gpu_seconds"]) == (2, 600.0)
    listed = {a["user_id"]: a for a in await admin(api, "GET", "/accounts")}
    assert (listed["gil"]["max_running"], listed[OWNER]["max_running"]) == (2, None)

    changed = await admin(api, "PATCH", "/accounts/gil", json={"max_running": 5.0})  # = 5
    assert (changed["max_running"], changed["max_held_gpu_seconds"]) == (5, 600.0)
    cleared = await admin(
        api, "PATCH", "/accounts/gil", json={"max_running": None, "max_held_gpu_seconds": None}
    )
    assert (cleared["max_running"], cleared["max_held_gpu_seconds"]) == (None, None)
    shown = await admin(api, "GET", "/accounts/gil")
    assert (shown["max_running"], shown["max_held_gpu_seconds"]) == (None, None)

    entries = await admin(api, "GET", "/audit?limit=3")
    assert [e["action"] for e in entries] == ["account.update", "account.update", "account.create"]
    assert entries[0]["detail"] == {
        "before": {"max_running": 5, "max_held_gpu_seconds": 600.0},
        "after": {"max_running": None, "max_held_gpu_seconds": None},
    }
    assert entries[1]["detail"] == {"before": {"max_running": 2}, "after": {"max_running": 5}}
    created = entries[2]["detail"]
    assert (created["max_running"], created["max_held_gpu_seconds"]) == (2, 600.0)


@pytest.mark.parametrize(
    "limit",
    [
        {"max_running": 0},
        {"max_running": -1},
        {"max_running": 1.5},
        {"max_running": "2"},
        {"max_running": True},
        {"max_held_gpu_seconds": 0},
        {"max_held_gpu_seconds": -60},
        {"max_held_gpu_seconds": "60"},
        {"max_held_gpu_seconds": 1e13},
    ],
)
async def test_a_limit_out_of_range_is_a_422_that_changes_nothing(
    api: Api, limit: dict[str, Any]
) -> None:
    await admin(api, "POST", "/accounts", 422, json={"user_id": "hal", **limit})
    await admin(api, "PATCH", f"/accounts/{SECOND}", 422, json=limit)
    shown = await admin(api, "GET", f"/accounts/{SECOND}")
    assert (shown["max_running"], shown["max_held_gpu_seconds"]) == (None, None)
    await admin(api, "GET", "/accounts/hal", 404)
    assert [e["action"] for e in await admin(api, "GET", "/audit")] == ["account.create"] * 3


async def test_the_caller_sees_its_own_limits(api: Api) -> None:
    limits = {"max_running": 3, "max_held_gpu_seconds": 90.5}
    await admin(api, "PATCH", f"/accounts/{SECOND}", json=limits)
    mine = (await api.client.get("/account", headers=SECOND_KEY)).json()
    assert (mine["max_running"], mine["max_held_gpu_seconds"]) == (3, 90.5)
    theirs = (await api.client.get("/account", headers=KEY)).json()
    assert (theirs["max_running"], theirs["max_held_gpu_seconds"]) == (None, None)


async def test_a_job_whose_gpu_seconds_pass_the_held_limit_is_refused_and_nothing_written(
    api: Api,
) -> None:
    await admin(api, "PATCH", f"/accounts/{SECOND}", json={"max_held_gpu_seconds": 60})
    refused = await api.client.post(
        "/enqueue-task", json={"kind": "long", "duration_s": 120}, headers=SECOND_KEY
    )
    assert refused.status_code == 422
    assert refused.json() == {
        "detail": "this job's 120 GPU-seconds pass the account's max_held_gpu_seconds (60)"
    }
    assert (await api.client.get("/tasks", headers=SECOND_KEY)).json()["tasks"] == []
    assert await api.runtime.redis.keys("fairgpu:job:*") == []

    within = await api.client.post(
        "/enqueue-task", json={"kind": "long", "duration_s": 60}, headers=SECOND_KEY
    )
    assert within.status_code == 200, within.text  # up to the limit itself
    others = await api.client.post(
        "/enqueue-task", json={"kind": "long", "duration_s": 120}, headers=KEY
    )
    assert others.status_code == 200  # the limit is the account's own


async def test_a_job_is_weighed_at_one_second_at_least(api: Api) -> None:
    await admin(api, "PATCH", f"/accounts/{SECOND}", json={"max_held_gpu_seconds": 0.5})
    body = {"kind": "short", "duration_s": 0.2}
    refused = await api.client.post("/enqueue-task", json=body, headers=SECOND_KEY)
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        "this job's 1 GPU-seconds pass the account's max_held_gpu_seconds (0.5)"
    )
    await admin(api, "PATCH", f"/accounts/{SECOND}", json={"max_held_gpu_seconds": None})
    assert (await api.client.post("/enqueue-task", json=body, headers=SECOND_KEY)).is_success
