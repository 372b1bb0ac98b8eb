"""Monthly budgets: what a budgeted account's submit hands the job store's admit check
(lua/submit.lua over_budget), the 402 it answers when the budget cannot cover the job, and an
account's use of the month for GET /account.

A budget counts what is billed in the calendar month (UTC, by Redis's clock) plus what the
account's unended jobs may still be billed: each job of a budgeted account holds its most
(its duration_s, at least MIN_BILLED_S, at its queue's price) from its submit to its end. So
however many jobs are submitted at once, their bills cannot overrun the budget.

On a fleet of classes (GPU_CLASSES) a cost budget counts money: the bills' cost, weighted by
their cards' prices, and a job holds its most at the priciest class it may run on. A GPU-second
budget, like max_held_gpu_seconds, counts plain GPU-seconds on any card.

A job of several cards (gpus N, issue 42) holds N times a one-card job's most, in GPU-seconds
and in cost alike: it will be billed every card (app/pricing.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import HTTPException, status

from app import pricing
from app.api.runtime import Runtime
from app.auth import Account
from app.models import Kind
from app.pricing import MICROS, MS
from app.settings import Settings
from app.store.submit import Budget, OverBudgetError
from app.usage_models import MonthUse


def budget(
    account: Account,
    settings: Settings,
    kind: Kind,
    duration_s: float,
    job_type: str,
    class_price: float = 1.0,
    gpus: int = 1,
) -> Budget | None:
    """What the admit check needs of a budgeted account's job; None for an account without a
    budget (nothing is checked or held). class_price is the highest price weight of the
    classes the job may run on (1.0 without a catalog): its cost is held at that, its
    GPU-seconds plain. duration_s is the job's wall-clock limit; it holds that on each of its
    gpus cards."""
    if account.budget_gpu_seconds is None and account.budget_cost_micros is None:
        return None  # the common case, on every submit: nothing to check or hold
    most = pricing.price(
        settings, kind, duration_s, job_type=job_type, class_price=class_price, gpus=gpus
    )
    limit_s = account.budget_gpu_seconds
    return Budget(
        billed_ms=None if limit_s is None else pricing.milliseconds(limit_s),
        cost_micros=account.budget_cost_micros,
        most_ms=most.billed_ms,
        most_micros=most.cost_micros,
    )


def payment_required(exc: OverBudgetError, job: Budget) -> HTTPException:
    """The 402 of a submit the month's budget cannot cover: what is left, and what the job
    may cost."""
    if exc.budget == "gpu_seconds":
        left, held, most, unit = exc.left / MS, exc.held / MS, job.most_ms / MS, " GPU-seconds"
        what = "GPU-second budget"
    else:
        left, held, most, unit = exc.left / MICROS, exc.held / MICROS, job.most_micros / MICROS, ""
        what = "cost budget"
    detail = (
        f"this month's {what} has {max(left, 0):g}{unit} left ({held:g}{unit} held by jobs "
        f"not ended yet); this job may use up to {most:g}{unit}"
    )
    return HTTPException(status.HTTP_402_PAYMENT_REQUIRED, detail=detail)


def month_of(at: float) -> str:
    """The UTC month of a Unix time, as lua/_lib.lua's month_of names it."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m")


async def month_use(runtime: Runtime, account: Account) -> MonthUse:
    """The account's bills of this month so far, what its jobs hold, and its budgets."""
    seconds, micros = await runtime.redis.time()
    month = month_of(seconds + micros / 1e6)
    use = await runtime.store.usage(account.user_id)
    billed_ms, cost = use.get(f"{month}:billed_ms", 0), use.get(f"{month}:cost_micros", 0)
    held_ms, held_micros = use.get("held_ms", 0), use.get("held_micros", 0)
    limit_s, limit_micros = account.budget_gpu_seconds, account.budget_cost_micros
    return MonthUse(
        month=month,
        billed_seconds=billed_ms / MS,
        cost=cost / MICROS,
        cost_micros=cost,
        held_seconds=held_ms / MS,
        held_cost=held_micros / MICROS,
        budget_gpu_seconds=limit_s,
        budget_cost=None if limit_micros is None else limit_micros / MICROS,
        left_gpu_seconds=None if limit_s is None else limit_s - (billed_ms + held_ms) / MS,
        left_cost=None if limit_micros is None else (limit_micros - cost - held_micros) / MICROS,
    )
