"""The ledger on SQLite and PostgreSQL: its migrations give the declared schema, a bill is
written once however often it arrives, pages follow the cursor, and usage adds up the bills."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app.bill import Bill
from app.ledger import bills
from app.ledger.database import Database
from app.ledger.schema import Base

DAY = 86_400.0
START = 1_795_000_000.0  # a day in November 2026


def a_bill(task_id: str, user: str = "u1", at: float = START, **more: object) -> Bill:
    """A bill as finish.lua writes it, read back."""
    fields: dict[str, object] = {
        "task_id": task_id, "user_id": user, "kind": "short", "type": "burn",
        "cost_micros": 2_000_000, "gpu_seconds": 1.5, "billed_ms": 1500, "billed_at": at,
        "description": "1.5 GPU-seconds",
    }  # fmt: skip
    return Bill.read({**fields, **more})


def test_the_migrations_make_the_schema_that_the_code_declares(db: Database) -> None:
    with db.engine.connect() as connection:
        context = MigrationContext.configure(connection)
        assert compare_metadata(context, Base.metadata) == []


def test_a_bill_is_written_once_however_often_it_arrives(db: Database) -> None:
    with db.sessions.begin() as session:
        assert bills.record(session, [a_bill("t1"), a_bill("t2")]) == 2
    with db.sessions.begin() as session:
        assert bills.record(session, [a_bill("t1"), a_bill("t3")]) == 1
        assert bills.record(session, [a_bill("t3", cost_micros=9)]) == 0  # the first one stays
    with db.sessions() as session:
        rows = bills.bills(session, "u1", limit=10)
        assert sorted(b.task_id for b in rows) == ["t1", "t2", "t3"]
        assert all(b.cost_micros == 2_000_000 for b in rows)


def test_pages_follow_the_cursor_newest_first_within_the_window(db: Database) -> None:
    rows = [a_bill(f"t{n:02d}", at=START + n * 60) for n in range(25)]
    rows.append(a_bill("other", user="u2", at=START + 30))
    with db.sessions.begin() as session:
        bills.record(session, rows)
    seen: list[str] = []
    before = None
    with db.sessions() as session:
        while page := bills.bills(session, "u1", limit=7, before=before):
            seen += [b.task_id for b in page]
            before = (page[-1].billed_at, page[-1].task_id)
        assert seen == [f"t{n:02d}" for n in reversed(range(25))]
        window = bills.bills(session, "u1", limit=100, start=START + 60, end=START + 5 * 60)
        assert [b.task_id for b in window] == ["t04", "t03", "t02", "t01"]


def test_usage_adds_up_the_bills_by_each_grouping(db: Database) -> None:
    pick = random.Random(7)
    rows = [
        a_bill(
            f"t{n}",
            user=pick.choice(["u1", "u2", "u3"]),
            at=START + pick.uniform(0, 5 * DAY),
            kind=pick.choice(["short", "long"]),
            type=pick.choice(["burn", "whisper"]),
            cost_micros=pick.randint(1, 10**9),
            gpu_seconds=pick.uniform(0.001, 3600),
        )
        for n in range(300)
    ]
    with db.sessions.begin() as session:
        bills.record(session, rows)
    fields = {"account": "user_id", "type": "type", "queue": "queue", "day": "day"}
    with db.sessions() as session:
        for group_by, field in fields.items():
            jobs: Counter[str] = Counter()
            cost: defaultdict[str, int] = defaultdict(int)
            gpu: defaultdict[str, float] = defaultdict(float)
            for bill in rows:
                key = str(bill.row()[field])
                jobs[key] += 1
                cost[key] += bill.cost_micros
                gpu[key] += bill.gpu_seconds
            found = bills.usage(session, group_by)  # type: ignore[arg-type]
            assert {u.key: u.jobs for u in found} == dict(jobs)
            assert {u.key: u.cost_micros for u in found} == dict(cost)  # exact: integers
            for u in found:
                assert abs(u.gpu_seconds - gpu[u.key]) < 1e-6 * max(1.0, gpu[u.key])
        mine = bills.usage(session, "account", user_id="u2", start=START, end=START + DAY)
        expected = [b for b in rows if b.user_id == "u2" and b.billed_at < START + DAY]
        assert [(u.key, u.jobs) for u in mine] == [("u2", len(expected))]


def test_a_page_joins_the_ledger_and_the_bills_on_their_way_each_once(db: Database) -> None:
    written = [a_bill(f"t{i}", at=START + i) for i in range(4)]
    with db.sessions.begin() as session:
        bills.record(session, written)
    on_the_way = [
        a_bill("t3", at=START + 3),
        a_bill("t4", at=START + 4),
        a_bill("t5", at=START + 5),
    ]
    with db.sessions() as session:
        ledger = bills.bills(session, "u1", limit=3)
    page = bills.page(ledger, on_the_way, limit=3)
    assert [b.task_id for b in page] == ["t5", "t4", "t3"]  # t3 in both: once
    later = bills.page(ledger, on_the_way, limit=3, before=(START + 3, "t3"))
    assert [b.task_id for b in later] == ["t2", "t1"]  # the ledger's page held 3 only
    assert bills.page(ledger, on_the_way, limit=9, start=START + 4, end=START + 5) == [
        on_the_way[1]
    ]


def test_usage_counts_a_bill_on_its_way_once_wherever_it_is(db: Database) -> None:
    with db.sessions.begin() as session:
        bills.record(session, [a_bill("t1"), a_bill("t2", user="u2", type="vad")])
    on_the_way = [a_bill("t2", user="u2", type="vad"), a_bill("t3", type="vad")]  # t2 written
    with db.sessions() as session:
        by_type = bills.usage_with(session, "type", on_the_way)
        mine = bills.usage_with(session, "account", on_the_way, user_id="u1")
        found = bills.find(session, "u1", "t1")
        not_mine = bills.find(session, "u1", "t2")
    assert [(u.key, u.jobs, u.cost_micros) for u in by_type] == [
        ("burn", 1, 2_000_000),
        ("vad", 2, 4_000_000),
    ]
    assert [(u.key, u.jobs, u.gpu_seconds) for u in mine] == [("u1", 2, 3.0)]
    assert found is not None and found.task_id == "t1"
    assert not_mine is None
