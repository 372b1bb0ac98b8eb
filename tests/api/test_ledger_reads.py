"""GET /billing-records and GET /usage read the SQL ledger and the bills still on their way to
it: a bill is there as soon as its job has ended, once, before and after the ledger's writer
has moved it; pages by time and cursor; usage sums equal the bills; the ledger outlives the
job records."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from sqlalchemy import create_engine

from app.ledger.outbox import STREAM, LedgerWriter, unwritten
from tests.api.conftest import Api
from tests.api.helpers import KEY, OWNER, SECOND, SECOND_KEY, TEAM_KEY, Worker
from tests.bills_in_flight import ENDED, OUTBOX_ENTRY

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): what they read lives in Redis and
    the database, both emptied for each test."""
    return shared_api


async def run_jobs(
    api: Api, worker: Worker, key: dict[str, str], durations: list[float]
) -> list[str]:
    ids = []
    for duration in durations:
        response = await api.client.post(
            "/enqueue-task", json={"kind": "short", "duration_s": duration}, headers=key
        )
        ids.append(response.json()["task_id"])
        worker.run(ids[-1])
    return ids


async def get(api: Api, path: str, key: dict[str, str] = KEY, expect: int = 200) -> Any:
    response = await api.client.get(path, headers=key)
    assert response.status_code == expect, response.text
    return response.json()


def write_ledger(api: Api, r: redis.Redis) -> int:
    return LedgerWriter(r, api.runtime.ledger.db, "test-writer").write_once()


async def test_a_bill_is_there_once_before_and_after_the_ledger_has_it(
    api: Api, worker: Worker, r: redis.Redis
) -> None:
    ids = await run_jobs(api, worker, KEY, [1, 2, 3])
    on_the_way = await get(api, "/billing-records")
    assert [b["task_id"] for b in on_the_way] == ids[::-1]
    assert len(unwritten(r)) == 3

    assert write_ledger(api, r) == 3
    assert unwritten(r) == []
    assert await get(api, "/billing-records") == on_the_way
    assert write_ledger(api, r) == 0  # nothing new


async def test_a_bill_the_previous_release_left_on_its_way_is_shown_as_it_was(
    api: Api, r: redis.Redis
) -> None:
    r.xadd(STREAM, {"bill": OUTBOX_ENTRY})
    shown = {
        "user_id": OWNER, "task_id": ENDED, "cost": 1.25, "cost_micros": 1_250_000,
        "description": "vad job (long queue), stopped at its time limit after 7.2 s (billed its"
        " budget of 5 s)",
        "kind": "long", "gpu_seconds": 7.25, "billed_seconds": 5.0, "billed_at": 1796416205.2245,
        "type": "vad", "gpu_class": None, "gpus": 1,
    }  # fmt: skip
    assert await get(api, "/billing-records") == [shown]
    assert write_ledger(api, r) == 1
    assert await get(api, "/billing-records") == [shown]


async def test_pages_follow_the_before_cursor_across_written_and_unwritten_bills(
    api: Api, worker: Worker, r: redis.Redis
) -> None:
    ids = await run_jobs(api, worker, KEY, [1, 1, 1])
    write_ledger(api, r)
    ids += await run_jobs(api, worker, KEY, [1, 1])  # these two still in the outbox
    newest_first = ids[::-1]

    pages: list[list[str]] = []
    query = "/billing-records?limit=2"
    while True:
        page = [b["task_id"] for b in await get(api, query)]
        if not page:
            break
        pages.append(page)
        query = f"/billing-records?limit=2&before={page[-1]}"
    assert pages == [newest_first[0:2], newest_first[2:4], newest_first[4:5]]

    missing = "00000000-0000-4000-8000-000000000000"
    await get(api, f"/billing-records?before={missing}", expect=404)
    others = await get(api, f"/billing-records?before={ids[0]}", key=SECOND_KEY, expect=404)
    assert others == {"detail": "before: no billing record of yours has this task_id"}


async def test_from_and_to_choose_a_window(api: Api, worker: Worker, r: redis.Redis) -> None:
    ids = await run_jobs(api, worker, KEY, [1, 1, 1])
    write_ledger(api, r)
    bills = await get(api, "/billing-records")
    middle = bills[1]["billed_at"]
    window = await get(api, f"/billing-records?from={middle}&to={bills[0]['billed_at']}")
    assert [b["task_id"] for b in window] == [ids[1]]
    assert await get(api, "/billing-records?from=2999-01-01") == []
    assert len(await get(api, "/billing-records?to=2999-01-01T00:00:00Z")) == 3
    assert await get(api, f"/billing-records?from={middle}&to={middle}") == []
    await get(api, "/billing-records?from=yesterday", expect=422)


async def test_usage_sums_equal_the_bills_for_each_grouping(
    api: Api, worker: Worker, r: redis.Redis
) -> None:
    await run_jobs(api, worker, KEY, [1.5, 2])
    await run_jobs(api, worker, SECOND_KEY, [3])
    write_ledger(api, r)
    await run_jobs(api, worker, SECOND_KEY, [0.25])  # on its way still
    mine = await get(api, "/billing-records")
    theirs = await get(api, "/billing-records", key=SECOND_KEY)

    by_account = await get(api, "/usage?group_by=account")  # an admin: every account
    rows = {row["key"]: row for row in by_account["rows"]}
    assert set(rows) == {OWNER, SECOND}
    for account, bills in ((OWNER, mine), (SECOND, theirs)):
        assert rows[account]["jobs"] == len(bills)
        assert rows[account]["cost_micros"] == sum(b["cost_micros"] for b in bills)
        assert rows[account]["gpu_seconds"] == pytest.approx(sum(b["gpu_seconds"] for b in bills))
    assert by_account["total"]["cost_micros"] == sum(b["cost_micros"] for b in mine + theirs)

    for group_by in ("type", "queue", "day"):
        report = await get(api, f"/usage?group_by={group_by}")
        assert report["total"]["jobs"] == 4 and len(report["rows"]) == 1
    assert (await get(api, "/usage?group_by=type"))["rows"][0]["key"] == "burn"
    assert (await get(api, "/usage?group_by=queue"))["rows"][0]["key"] == "short"

    own = await get(api, "/usage", key=SECOND_KEY)  # anyone else: their own only
    assert [row["key"] for row in own["rows"]] == [SECOND]
    assert own["total"]["jobs"] == len(theirs)
    assert (await get(api, "/usage", key=TEAM_KEY))["rows"] == []
    await get(api, "/usage?group_by=colour", expect=422)


async def test_the_ledger_outlives_the_job_records(
    api: Api, worker: Worker, r: redis.Redis
) -> None:
    ids = await run_jobs(api, worker, KEY, [1, 2])
    write_ledger(api, r)
    r.flushall()  # every record expired (and more)
    assert [b["task_id"] for b in await get(api, "/billing-records")] == ids[::-1]
    assert (await get(api, "/usage"))["total"]["jobs"] == 2


async def test_while_the_database_is_away_bills_answer_503_and_submits_go_on(api: Api) -> None:
    """The database cannot be reached (its engine now points at a port where nothing listens):
    what needs it answers 503 with Retry-After, what needs Redis alone works, and the accounts
    in hand keep authenticating."""
    away = create_engine("postgresql+psycopg://fairgpu@127.0.0.1:1/fairgpu", pool_pre_ping=True)
    api.runtime.ledger.db.sessions.configure(bind=away)
    try:
        for path in ("/billing-records", "/usage", "/admin/accounts", "/admin/audit"):
            response = await api.client.get(path, headers=KEY)
            assert response.status_code == 503, (path, response.text)
            assert response.headers["retry-after"] == "5"
            assert "database is unavailable" in response.json()["detail"]
        await api.runtime.accounts.reload()  # a change heard now: the accounts in hand stay
        submitted = await api.client.post(
            "/enqueue-task", json={"kind": "short", "duration_s": 1}, headers=KEY
        )
        assert submitted.status_code == 200
    finally:
        away.dispose()
