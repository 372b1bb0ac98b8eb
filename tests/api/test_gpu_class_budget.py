"""A budgeted account's job holds, until it ends, its most at the priciest class it may run on
(issue 41): a cost budget counts money, weighted by the class's price; a GPU-second budget
counts plain GPU-seconds on any card."""

from __future__ import annotations

from app.api.budgets import budget
from app.auth import Account
from app.settings import Settings

SETTINGS = Settings()
BUDGETED = Account(user_id="a", api_keys=("k",), budget_gpu_seconds=3600.0, budget_cost=1000.0)


def test_a_job_holds_its_cost_at_its_class_price_and_its_seconds_plain() -> None:
    plain = budget(BUDGETED, SETTINGS, "short", 60.0, "burn")
    big = budget(BUDGETED, SETTINGS, "short", 60.0, "burn", class_price=2.0)
    assert plain is not None and big is not None
    assert (plain.most_ms, plain.most_micros) == (60_000, 30_000_000)  # 60 s at 0.5/s
    assert (big.most_ms, big.most_micros) == (60_000, 60_000_000)
    assert (big.billed_ms, big.cost_micros) == (plain.billed_ms, plain.cost_micros)


def test_an_account_without_a_budget_holds_nothing_on_any_class() -> None:
    free = Account(user_id="b", api_keys=("k",))
    assert budget(free, SETTINGS, "long", 60.0, "burn", class_price=3.0) is None
