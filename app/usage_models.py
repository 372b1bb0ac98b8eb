"""Wire shapes of an account's use (pydantic): GET /account's view and its month's use, a bill
as GET /billing-records answers it, and GET /usage's report. The job's shapes are in
app/models.py, the admin API's in app/admin_models.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.account import Limits, Named, Profile
from app.models import Kind


class MonthUse(BaseModel):
    """An account's use of the calendar month so far (UTC, Redis's clock), and its budgets."""

    month: str = Field(description="YYYY-MM")
    billed_seconds: float = Field(description="GPU-seconds billed this month")
    cost: float = Field(description="what this month's bills add up to")
    cost_micros: int
    held_seconds: float = Field(
        description="the most its queued and running jobs may still be billed (counted against "
        "a budget until they end; 0 without a budget)"
    )
    held_cost: float
    budget_gpu_seconds: float | None = Field(description="a month's budget; null: none")
    budget_cost: float | None = Field(description="a month's budget; null: none")
    left_gpu_seconds: float | None = Field(description="budget - billed - held; null: no budget")
    left_cost: float | None


class AccountView(Limits, Profile, Named):
    """GET /account: who the key belongs to, its profile and its limits (app/account.py), its
    quota resolved, and this month's use. Every field is in every answer."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    max_queued: int = Field(description="most jobs it may have queued in each queue")
    month: MonthUse


class BillingRecord(BaseModel):
    """One charge: an ended job billed once to its account (app/bill.py Bill.record)."""

    user_id: str
    task_id: str
    cost: float = Field(
        description="price per second x billed_seconds x gpu_class's price weight, exact to the "
        "micro-unit"
    )
    cost_micros: int = Field(description="the cost in millionths: bills add up exactly")
    description: str = Field(description="what was billed, and how the job ended if not well")
    kind: Kind = Field(description="the job's queue")
    gpu_seconds: float = Field(
        description="the seconds the job's runs measured from their start to their end, a "
        "started millisecond counting in full, times gpus"
    )
    billed_seconds: float = Field(
        description="the job's seconds, never more than its duration_s, at least MIN_BILLED_S, "
        "times gpus"
    )
    billed_at: float = Field(description="when it was billed: Unix seconds, Redis's clock")
    type: str = Field("burn", description="the job's type")
    gpu_class: str | None = Field(
        None,
        description="the class of card (GPU_CLASSES) its last run had, whose price weight the "
        "cost counts; null without a catalog, and on a bill made before classes",
    )
    gpus: int = Field(
        1,
        ge=1,
        description="the cards the job held at once, each billed: 1 on a bill made before jobs "
        "of several cards",
    )


GroupBy = Literal["account", "type", "queue", "day", "gpu_class"]


class UsageRow(BaseModel):
    """What one group (an account, a job type, a queue, a UTC day, a class of card) used."""

    key: str | None = Field(
        description="the group; null only for the bills with no gpu_class (a fleet without "
        "GPU_CLASSES), grouped by gpu_class"
    )
    gpu_seconds: float = Field(
        description="GPU-seconds used: every card of a job counted, plain whatever the class"
    )
    jobs: int = Field(description="jobs billed")
    cost: float = Field(description="what their bills add up to, weighted by their classes")
    cost_micros: int


class UsageReport(BaseModel):
    """GET /usage: the bills of [from, to), summed per group."""

    model_config = ConfigDict(populate_by_name=True)

    group_by: GroupBy
    from_: float | None = Field(alias="from", description="Unix time; null: from the start")
    to: float | None = Field(description="Unix time, excluded; null: until now")
    rows: list[UsageRow]
    total: UsageRow
