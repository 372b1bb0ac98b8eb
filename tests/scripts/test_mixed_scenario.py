"""scripts/load.py --scenario mixed at its smallest: a stack whose workers act as two big and two
small cards on two hosts runs both rounds (a backlog, then steady arrivals); no job runs on a card
its account may not use or on a host without its class, each is billed once with the class it
ran on, and the report has every account's row with its ideal share. No timing or share is
checked: those are the full run's to report (docs/fairness.md, "A mixed fleet")."""

from __future__ import annotations

import pytest

from scripts.benchkit.fairness.fleet import ideal_shares
from tests.scripts.scenario_run import scenario

ACCOUNTS = {"mixed-big": "big", "mixed-any": "small or big", "mixed-small": "small"}


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_the_mixed_scenario_keeps_every_job_on_its_cards() -> None:
    rounds, tables = scenario("mixed", "0.1")
    assert [r["arrivals"] for r in rounds] == ["backlog", "steady"]
    for outcome in rounds:
        assert set(outcome["checks"].values()) == {0}, outcome["checks"]
        rows = {row["account"]: row for row in outcome["rows"]}
        assert {a: row["may_use"] for a, row in rows.items()} == ACCOUNTS
        assert rows["mixed-big"]["ran_on"].startswith("big ")
        assert rows["mixed-small"]["ran_on"].startswith("small ")
        assert sum(row["ideal"] for row in rows.values()) == pytest.approx(1.0)
    assert "mixed, steady: price-weighted shares" in tables


def test_the_ideal_gives_a_bottlenecked_account_all_it_can_reach() -> None:
    """Max-min over what each may use: with one small card of price 1, the small-only account
    is held to it, and the other two split the big cards' 4."""
    may_use = {"b": ("big",), "a": ("small", "big"), "s": ("small",)}
    weights = {"b": 1.0, "a": 1.0, "s": 1.0}
    assert ideal_shares(may_use, {"big": 4.0, "small": 1.0}, weights) == pytest.approx(
        {"s": 0.2, "a": 0.4, "b": 0.4}
    )
    assert ideal_shares(may_use, {"big": 4.0, "small": 2.0}, weights) == pytest.approx(
        {"s": 1 / 3, "a": 1 / 3, "b": 1 / 3}
    )
