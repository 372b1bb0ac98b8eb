"""Bill: what one job is charged, once. Its fields are declared here, once, and so is every
shape a bill takes on its way from the worker to GET /billing-records:

    Charge.to_lua()   what the worker charges, as finish.lua takes it: named fields, inside the
                      run's end (app/store/recorder.py RunEnd.to_lua)
    finish.lua        keeps those fields as they came, adds the stamp (STAMPED: the job, its
                      account, queue and type from the job's record; billed_at from Redis's
                      clock: lua/runs.lua stamp_bill), and adds the bill to the ledger's outbox
    Bill.read()       an outbox entry, of this release or an older one, back into a Bill
    Bill.row()        its SQL row, in the table that table() declares; Bill.from_row() back
    Bill.record()     its wire shape, app.usage_models.BillingRecord

So a new field is declared on Charge (the worker prices it) or on Bill (the store stamps it,
in stamp_bill), with a default (how a bill made before it reads), given a column in table() and
a migration that adds it, and a field of BillingRecord (tests/test_bill.py checks both); the Lua
stores a charge's fields without naming them (tests/store/test_run_end.py).

A bill names the class of card its job ended on (gpu_class, issue 41; null where GPU_CLASSES is
unset): its cost is the seconds billed times the queue's price times the class's price weight,
while billed_ms stays plain GPU-time, so GPU-second budgets and reports count cards alike.

A bill names how many cards its job held (gpus, issue 42; 1 on a bill made before): its
gpu_seconds and billed_ms count every card (N times the job's own seconds), and so its cost.

Money is whole micro-units and time whole milliseconds, so bills add up exactly. The Lua's JSON
(cjson) writes numbers with 14 significant digits: integers stay exact below 1e14.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import (
    BigInteger,
    Column,
    Date,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

from app.models import Kind
from app.usage_models import BillingRecord

MICROS = 1_000_000  # micro-units in one unit of money
MS = 1000  # milliseconds in a second
#: The SQL column of a field where the two names differ (a bill's kind is its queue).
COLUMNS = {"kind": "queue"}


@dataclass(frozen=True, kw_only=True)
class Charge:
    """What the worker charges for a job (app/pricing.py prices it): the cost, what the bill
    says, the seconds the job ran and those billed."""

    cost_micros: int
    description: str
    #: The seconds the job's runs measured (their own process's clock), a started millisecond
    #: counting in full, times its cards (gpus): every card held is a GPU-second used.
    gpu_seconds: float
    #: The seconds billed, in milliseconds, times its cards: each card's are the job's seconds,
    #: never more than its duration_s, at least MIN_BILLED_S.
    billed_ms: int
    #: The class of card its last run had (GPU_CLASSES); None where no catalog is declared, and
    #: for a bill made before classes existed. Its price weight is in cost_micros already.
    gpu_class: str | None = None
    #: The cards the job held at once (all of gpu_class, on one host); 1 on a bill made before
    #: jobs of several cards.
    gpus: int = 1

    def __post_init__(self) -> None:
        check_gpus(self.gpus)

    @property
    def cost(self) -> Decimal:
        """The cost in units of money, exactly."""
        return Decimal(self.cost_micros).scaleb(-6)

    @property
    def billed_seconds(self) -> float:
        """The seconds billed."""
        return self.billed_ms / MS

    def to_lua(self) -> dict[str, Any]:
        """The charge as finish.lua takes it: every field by its name (a subclass's too)."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class Bill(Charge):
    """A charge as the store recorded it, once per job: stamped with the job, its account, its
    queue and type (from the job's record) and when it was billed (Redis's clock)."""

    task_id: str
    user_id: str
    kind: Kind
    type: str = "burn"  # a job from before types existed was a burn job
    billed_at: float

    @classmethod
    def read(cls, raw: str | bytes | Mapping[str, Any]) -> Bill:
        """A bill as finish.lua writes it (JSON text, or parsed), of this release or an older
        one: before exact billing a bill had a float `cost` and no `billed_ms` (it was billed
        its gpu_seconds); before job types, no `type`; before GPU classes, no `gpu_class` (it
        reads null); before jobs of several cards, no `gpus` (it reads 1). Fields it does not
        know are left."""
        data = dict(json.loads(raw) if isinstance(raw, str | bytes) else raw)
        if "cost_micros" not in data:
            data["cost_micros"] = round(data["cost"] * MICROS)
        if data.get("billed_ms") is None:
            data["billed_ms"] = round(data["gpu_seconds"] * MS)
        data["type"] = data.get("type") or "burn"
        if data.get("gpus") is None:
            data["gpus"] = 1
        return _BILL.validate_python(data)

    def row(self) -> dict[str, Any]:
        """The bill as a row of the ledger's table (table())."""
        values = {COLUMNS.get(name, name): value for name, value in asdict(self).items()}
        return {**values, "day": day_of(self.billed_at)}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Bill:
        """The bill of a row of the ledger's table."""
        names = {column: name for name, column in COLUMNS.items()}
        return _BILL.validate_python({names.get(key, key): value for key, value in row.items()})

    def record(self) -> BillingRecord:
        """The bill as GET /billing-records answers it: its fields, with the cost also in units
        of money (the float nearest the exact cost) and the seconds billed in seconds."""
        shown = {name: value for name, value in asdict(self).items() if name != "billed_ms"}
        return BillingRecord(
            **shown, cost=self.cost_micros / MICROS, billed_seconds=self.billed_seconds
        )


_BILL = TypeAdapter(Bill)
#: The fields finish.lua stamps a charge with (lua/runs.lua stamp_bill).
STAMPED = tuple(f.name for f in fields(Bill) if f.name not in {g.name for g in fields(Charge)})


def check_gpus(gpus: int) -> int:
    """A count of cards, checked: a whole number of at least 1 (a bool is not one)."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"gpus must be an integer of at least 1, got {gpus!r}")
    return gpus


def day_of(at: float) -> date:
    """The UTC day of a Unix time."""
    return datetime.fromtimestamp(at, UTC).date()


def table(metadata: MetaData) -> Table:
    """The ledger's table of bills: a column per field of Bill (COLUMNS renames), and the UTC
    day of billed_at, so that usage is grouped by day alike on every database. The job id is
    the key: a bill is written once, however often its writer is told of it."""
    return Table(
        "bills",
        metadata,
        Column("task_id", String(64), primary_key=True),
        Column("user_id", String(128), nullable=False),
        Column("queue", String(16), nullable=False),
        Column("type", String(128), nullable=False),
        Column("cost_micros", BigInteger, nullable=False),
        Column("gpu_seconds", Float, nullable=False),
        Column("billed_ms", BigInteger, nullable=False),
        Column("billed_at", Float, nullable=False),
        Column("day", Date, nullable=False),
        Column("description", Text, nullable=False),
        Column("gpu_class", String(64), nullable=True),
        # a bill written before jobs of several cards held one (migration 0005 fills it so)
        Column("gpus", Integer, nullable=False, server_default="1"),
        Index("bills_by_account", "user_id", "billed_at"),
    )
