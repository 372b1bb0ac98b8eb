"""The ledger's outbox on a real Redis and a real database: a bill reaches the ledger once,
a writer that dies holding bills loses none of them to the next writer and doubles none, and
a bill on its way is already visible."""

from __future__ import annotations

import json

import redis

from app.bill import Bill
from app.ledger import bills
from app.ledger.database import Database
from app.ledger.outbox import GROUP, STREAM, LedgerWriter, ensure_group, unwritten
from tests.bills_in_flight import ENDED, OUTBOX_ENTRY, OWNER

START = 1_795_000_000.0


def billed(r: redis.Redis, task_id: str, user: str = "u1") -> None:
    """A bill as finish.lua adds it to the stream."""
    bill = {
        "user_id": user, "task_id": task_id, "kind": "short", "type": "burn",
        "cost_micros": 1_000_000, "description": "1 GPU-second", "gpu_seconds": 1.0,
        "billed_ms": 1000, "billed_at": START,
    }  # fmt: skip
    r.xadd(STREAM, {"bill": json.dumps(bill)})


def ledger_ids(db: Database) -> list[str]:
    with db.sessions() as session:
        return sorted(b.task_id for b in bills.bills(session, "u1", limit=100))


def test_a_bill_on_its_way_is_visible_and_then_in_the_ledger_once(
    db: Database, r: redis.Redis
) -> None:
    billed(r, "t1")
    billed(r, "t2")
    assert [b.task_id for b in unwritten(r, "u1")] == ["t1", "t2"]
    assert unwritten(r, "u2") == []
    writer = LedgerWriter(r, db, "w1")
    assert writer.write_once() == 2
    assert ledger_ids(db) == ["t1", "t2"]
    assert unwritten(r) == [] and r.xlen(STREAM) == 0
    billed(r, "t1")  # told again (a retried finish): written once all the same
    assert writer.write_once() == 0
    assert ledger_ids(db) == ["t1", "t2"]


def test_bills_held_by_a_writer_that_died_are_written_by_the_next_once(
    db: Database, r: redis.Redis
) -> None:
    for n in range(5):
        billed(r, f"t{n}")
    ensure_group(r)
    # A writer reads them, then dies before the database (or before its acknowledgement).
    r.xreadgroup(GROUP, "dead", {STREAM: ">"}, count=100)
    survivor = LedgerWriter(r, db, "w2", idle_ms=0)
    assert survivor.write_once() == 5
    assert ledger_ids(db) == [f"t{n}" for n in range(5)]
    assert r.xpending(STREAM, GROUP)["pending"] == 0


def test_a_writer_that_dies_after_the_database_doubles_nothing(
    db: Database, r: redis.Redis
) -> None:
    billed(r, "t1")
    ensure_group(r)
    entries = r.xreadgroup(GROUP, "dead", {STREAM: ">"}, count=100)
    fields = entries[0][1][0][1]
    with db.sessions.begin() as session:  # its insert committed, its XACK never came
        bills.record(session, [Bill.read(fields[b"bill"])])
    assert LedgerWriter(r, db, "w2", idle_ms=0).write_once() == 0
    assert ledger_ids(db) == ["t1"]
    assert r.xlen(STREAM) == 0


def test_the_billing_lists_of_older_releases_are_moved_into_the_ledger_once(
    r: redis.Redis, db: Database
) -> None:
    exact = {"user_id": "u", "task_id": "t-new", "kind": "short", "cost_micros": 1_500_000,
             "description": "Short GPU job", "gpu_seconds": 2.5, "billed_ms": 3000,
             "billed_at": 1_790_000_000.0}  # fmt: skip
    older = {"user_id": "u", "task_id": "t-old", "kind": "long", "cost": 0.25,  # a float cost
             "description": "Long GPU job", "gpu_seconds": 1.0,
             "billed_at": 1_780_000_000.0}  # fmt: skip
    r.rpush("fairgpu:billing:u", json.dumps(exact), json.dumps(older))
    writer = LedgerWriter(r, db, "w1")

    assert writer.adopt_old_lists() == 2
    assert r.exists("fairgpu:billing:u") == 0
    with db.sessions() as session:
        rows = {row.task_id: row for row in bills.bills(session, "u", limit=10)}
    assert (rows["t-new"].cost_micros, rows["t-new"].billed_ms) == (1_500_000, 3000)
    assert (rows["t-old"].cost_micros, rows["t-old"].billed_ms, rows["t-old"].kind) == (
        250_000,
        1000,
        "long",
    )
    r.rpush("fairgpu:billing:u", json.dumps(exact))  # seen again (a crash before the delete)
    assert writer.adopt_old_lists() == 0


def test_a_bill_the_previous_release_left_in_the_outbox_is_written_as_it_was(
    db: Database, r: redis.Redis
) -> None:
    r.xadd(STREAM, {"bill": OUTBOX_ENTRY})
    [on_its_way] = unwritten(r, OWNER)

    assert LedgerWriter(r, db, "w1").write_once() == 1

    with db.sessions() as session:
        [written] = bills.bills(session, OWNER, limit=10)
    assert written == on_its_way == Bill.read(OUTBOX_ENTRY)
    assert (written.task_id, written.kind, written.type) == (ENDED, "long", "vad")
    assert (written.cost_micros, written.gpu_seconds, written.billed_ms) == (1_250_000, 7.25, 5000)
