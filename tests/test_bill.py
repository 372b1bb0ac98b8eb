"""A bill's shapes, all made in app/bill.py: each carries every field of the record, so a new
field is declared there (with its column) and on the wire model, and nowhere else in Python;
and a bill comes back the same from each shape, including an older release's outbox entry."""

from __future__ import annotations

import json
from dataclasses import asdict, fields

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import MetaData

from app.bill import COLUMNS, STAMPED, Bill, Charge, day_of, table
from app.usage_models import BillingRecord
from tests.bills_in_flight import ENDED, OUTBOX_ENTRY

bills = st.builds(
    Bill,
    cost_micros=st.integers(0, 10**14 - 1),
    description=st.text(),
    gpu_seconds=st.integers(0, 10**9).map(lambda ms: ms / 1000),
    billed_ms=st.integers(0, 10**9),
    task_id=st.uuids().map(str),
    user_id=st.text(min_size=1, max_size=128),
    kind=st.sampled_from(["short", "long"]),
    type=st.sampled_from(["burn", "vad", "digits-train"]),
    billed_at=st.floats(0, 4e9),
    gpu_class=st.none() | st.sampled_from(["big", "small"]),
    gpus=st.integers(1, 64),
)


def names(record: type) -> set[str]:
    return {f.name for f in fields(record)}


def test_the_store_stamps_what_the_worker_does_not_charge() -> None:
    assert set(STAMPED) == {"task_id", "user_id", "kind", "type", "billed_at"}
    assert names(Bill) == names(Charge) | set(STAMPED)


def test_the_ledger_has_a_column_for_each_field_and_the_day() -> None:
    columns = set(table(MetaData()).columns.keys())
    assert columns == {COLUMNS.get(name, name) for name in names(Bill)} | {"day"}


def test_the_wire_shape_shows_each_field_and_the_units_a_person_reads() -> None:
    shown = set(BillingRecord.model_fields)
    assert shown == (names(Bill) - {"billed_ms"}) | {"cost", "billed_seconds"}


@given(bills)
def test_a_bill_comes_back_the_same_from_the_outbox_and_from_its_row(bill: Bill) -> None:
    assert Bill.read(json.dumps(asdict(bill))) == bill
    row = bill.row()
    assert row["day"] == day_of(bill.billed_at)
    assert Bill.from_row(row) == bill


@given(bills)
def test_the_wire_shape_is_the_bill_in_units_of_money_and_seconds(bill: Bill) -> None:
    record = bill.record()
    assert record.model_dump(exclude={"cost", "billed_seconds"}) == {
        name: value for name, value in asdict(bill).items() if name != "billed_ms"
    }
    assert record.cost_micros == bill.cost_micros
    assert record.cost == bill.cost_micros / 1_000_000
    assert record.billed_seconds == bill.billed_ms / 1000


def test_a_bill_the_previous_release_left_in_the_outbox_reads_as_it_was_written() -> None:
    bill = Bill.read(OUTBOX_ENTRY.encode())
    assert (bill.task_id, bill.kind, bill.type) == (ENDED, "long", "vad")
    assert (bill.cost_micros, bill.gpu_seconds, bill.billed_ms) == (1_250_000, 7.25, 5000)
    assert bill.billed_at == 1796416205.2245
    written = {k: v for k, v in json.loads(OUTBOX_ENTRY).items() if k != "billed_ms"}
    shown = {**written, "cost": 1.25, "billed_seconds": 5.0, "gpu_class": None, "gpus": 1}
    assert bill.record().model_dump() == shown


def test_bills_of_older_releases_read_with_their_defaults() -> None:
    before_exact_billing = {
        "user_id": "u", "task_id": "t", "kind": "short", "cost": 1.25,
        "description": "Short GPU job", "gpu_seconds": 2.5, "billed_at": 1.0,
    }  # fmt: skip
    bill = Bill.read(before_exact_billing)
    assert (bill.cost_micros, bill.billed_ms, bill.type) == (1_250_000, 2500, "burn")
    assert (bill.gpu_class, bill.gpus) == (None, 1)  # before classes, before several cards
    future = {**asdict(bill), "runs": 3}  # a field of a newer release is left
    assert Bill.read(future) == bill


@pytest.mark.parametrize("gpus", [0, -1, True, 1.5, "2"])
def test_a_bill_of_no_card_or_of_a_count_that_is_not_whole_is_refused(gpus: object) -> None:
    with pytest.raises(ValueError, match="gpus"):
        Charge(cost_micros=1, description="", gpu_seconds=1.0, billed_ms=1000, gpus=gpus)  # type: ignore[arg-type]
