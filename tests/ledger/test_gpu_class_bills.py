"""Bills by class of card (issue 41) on SQLite and PostgreSQL: migration 0004 gives every bill
there is a gpu_class of null and keeps it otherwise as it was; a bill's class is written and read
back; usage groups by class, the bills without one (no catalog) last, with the bills still on
their way counted once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app.ledger import bills
from app.ledger.database import Database, alembic_config
from app.ledger.schema import Base
from tests.ledger.conftest import empty_database, written_at
from tests.ledger.test_bills import START, a_bill


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def test_bills_there_are_gain_a_null_class_and_keep_the_rest(unmigrated_url: str) -> None:
    # a bill as 0003's code wrote it
    written_at(
        unmigrated_url,
        "0003",
        "INSERT INTO bills (task_id, user_id, queue, type, cost_micros, gpu_seconds,"
        " billed_ms, billed_at, day, description) VALUES ('t0', 'u1', 'long', 'vad',"
        " 1250000, 7.25, 5000, :at, '2026-11-18', 'vad job (long queue)')",
        {"at": START},
    )
    config = alembic_config(unmigrated_url)

    db = Database(unmigrated_url)
    try:
        with db.engine.connect() as connection:
            assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        with db.sessions() as session:
            [bill] = bills.bills(session, "u1", limit=10)
        assert (bill.task_id, bill.cost_micros, bill.billed_ms, bill.gpu_class) == (
            "t0",
            1_250_000,
            5000,
            None,
        )
    finally:
        db.close()
    command.downgrade(config, "0003")
    engine = sa.create_engine(unmigrated_url)
    try:
        columns = {c["name"] for c in sa.inspect(engine).get_columns("bills")}
        indexes = {i["name"] for i in sa.inspect(engine).get_indexes("bills")}
    finally:
        engine.dispose()
    assert "gpu_class" not in columns and "cost_micros" in columns
    assert "bills_by_account" in indexes


def test_a_bill_keeps_its_class(db: Database) -> None:
    with db.sessions.begin() as session:
        bills.record(session, [a_bill("t1", gpu_class="big"), a_bill("t2")])
    with db.sessions() as session:
        found = {b.task_id: b.gpu_class for b in bills.bills(session, "u1", limit=10)}
    assert found == {"t1": "big", "t2": None}


def test_usage_groups_by_class_the_bills_without_one_last(db: Database) -> None:
    written = [
        a_bill("t1", gpu_class="small"),
        a_bill("t2", gpu_class="big", cost_micros=4_000_000),
        a_bill("t3"),  # billed before the catalog was declared
        a_bill("t4", user="u2", gpu_class="big", cost_micros=4_000_000),
    ]
    with db.sessions.begin() as session:
        bills.record(session, written)
    on_the_way = [a_bill("t4", user="u2", gpu_class="big"), a_bill("t5", gpu_class="small")]
    with db.sessions() as session:
        everyone = bills.usage(session, "gpu_class")
        with_the_way = bills.usage_with(session, "gpu_class", on_the_way)
        mine = bills.usage_with(session, "gpu_class", on_the_way, user_id="u2")
    assert [(u.key, u.jobs, u.gpu_seconds, u.cost_micros) for u in everyone] == [
        ("big", 2, 3.0, 8_000_000),
        ("small", 1, 1.5, 2_000_000),
        (None, 1, 1.5, 2_000_000),
    ]
    assert [(u.key, u.jobs) for u in with_the_way] == [("big", 2), ("small", 2), (None, 1)]
    assert [(u.key, u.jobs, u.cost_micros) for u in mine] == [("big", 1, 4_000_000)]
