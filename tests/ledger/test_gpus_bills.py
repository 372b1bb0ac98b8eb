"""Bills of jobs of several cards (issue 42) on SQLite and PostgreSQL: migration 0005 gives
every bill there is `gpus` 1 and keeps it otherwise as it was, and goes down again; a bill's
count of cards goes from the store's end of the job through the outbox to the ledger and GET
/billing-records's shape, and its GPU-seconds count every card in the month's use and usage."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app import pricing
from app.api.budgets import month_of
from app.ledger import bills
from app.ledger.database import Database, alembic_config
from app.ledger.outbox import LedgerWriter, unwritten
from app.ledger.schema import Base
from app.models import Status
from app.settings import Settings
from app.store import JobRecorder
from app.store.keys import usage_key
from app.store.record import decode
from app.store.submit import NewJob
from tests.api.helpers import USERS_FILE
from tests.ledger.conftest import empty_database, written_at
from tests.ledger.test_bills import START, a_bill
from tests.store.support import write_job

OWNER = "11111111-1111-1111-1111-111111111111"
JOB = "0b7d2f6e-0000-4000-8000-000000000042"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def bill_columns(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return {c["name"] for c in sa.inspect(engine).get_columns("bills")}
    finally:
        engine.dispose()


def test_bills_there_are_read_as_one_card_and_the_column_goes_down_again(
    unmigrated_url: str,
) -> None:
    # a bill as 0004's code wrote it
    written_at(
        unmigrated_url,
        "0004",
        "INSERT INTO bills (task_id, user_id, queue, type, cost_micros, gpu_seconds,"
        " billed_ms, billed_at, day, description, gpu_class) VALUES ('t0', 'u1',"
        " 'long', 'vad', 2500000, 7.25, 5000, :at, '2026-11-18', 'vad job', 'big')",
        {"at": START},
    )
    config = alembic_config(unmigrated_url)

    db = Database(unmigrated_url)
    try:
        with db.engine.connect() as connection:
            assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        with db.sessions.begin() as session:
            bills.record(session, [a_bill("t1", gpus=2, gpu_seconds=3.0, billed_ms=3000)])
        with db.sessions() as session:
            found = {b.task_id: b for b in bills.bills(session, "u1", limit=10)}
        old_bill = found["t0"]
        assert (old_bill.gpus, old_bill.gpu_class, old_bill.cost_micros) == (1, "big", 2_500_000)
        assert (old_bill.gpu_seconds, old_bill.billed_ms) == (7.25, 5000)
        assert (found["t1"].gpus, found["t1"].gpu_seconds) == (2, 3.0)
    finally:
        db.close()

    command.downgrade(config, "0004")
    columns = bill_columns(unmigrated_url)
    assert "gpus" not in columns and "gpu_class" in columns
    engine = sa.create_engine(unmigrated_url)
    try:
        with engine.connect() as connection:
            kept = connection.execute(sa.text("SELECT task_id FROM bills ORDER BY task_id"))
            assert [row[0] for row in kept] == ["t0", "t1"]  # the bills stay, one card each
    finally:
        engine.dispose()
    command.upgrade(config, "head")  # and up again: every bill reads as one card
    assert "gpus" in bill_columns(unmigrated_url)


def test_usage_counts_every_card_of_a_job(db: Database) -> None:
    written = [
        a_bill("t1", gpus=2, gpu_seconds=3.0, billed_ms=3000, cost_micros=4_000_000),
        a_bill("t2"),  # one card, 1.5 s
    ]
    with db.sessions.begin() as session:
        bills.record(session, written)
    on_the_way = [a_bill("t3", gpus=4, gpu_seconds=6.0, billed_ms=6000, cost_micros=8_000_000)]
    with db.sessions() as session:
        [used] = bills.usage_with(session, "account", on_the_way)
    assert (used.jobs, used.gpu_seconds, used.cost_micros) == (3, 10.5, 14_000_000)


def test_a_two_card_bill_goes_from_the_jobs_end_to_the_ledger_with_its_cards(
    db: Database, r: redis.Redis, redis_url: str
) -> None:
    settings = Settings(redis_url=redis_url, users_file=USERS_FILE)
    asyncio.run(_write(settings, NewJob(JOB, "short", 30.0, job_type="vad")))
    recorder = JobRecorder(r, settings)
    assert recorder.start(JOB, "token-1", "cpu@test", None).run
    charge = pricing.price(settings, "short", 3.0, job_type="vad", budget_s=30.0, gpus=2)

    assert recorder.finish(JOB, "token-1", Status.SUCCESS, charge=charge, owner=OWNER)

    [on_its_way] = unwritten(r, OWNER)
    assert (on_its_way.gpus, on_its_way.gpu_seconds, on_its_way.billed_ms) == (2, 6.0, 6000)
    use = decode(r.hgetall(usage_key(OWNER)))  # what the month's budget counts
    assert use[f"{month_of(on_its_way.billed_at)}:billed_ms"] == "6000"
    assert LedgerWriter(r, db, "w1").write_once() == 1
    with db.sessions() as session:
        written = bills.find(session, OWNER, JOB)
    assert written == on_its_way
    record = written.record()
    assert (record.gpus, record.gpu_seconds, record.billed_seconds) == (2, 6.0, 6.0)
    assert record.cost == 3.0  # 6 GPU-seconds at 0.5/s


async def _write(settings: Settings, job: NewJob) -> None:
    client = aioredis.Redis.from_url(settings.redis_url)
    try:
        await write_job(client, settings, OWNER, job)
    finally:
        await client.aclose()
