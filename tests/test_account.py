"""An account's shapes, all made of app/account.py's terms: each carries every term, so a new
one is declared there (with its migration) and nowhere else in Python; and an account comes
back the same from each shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
import typer
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from app.account import (
    MONEY,
    TERMS,
    Account,
    Budgets,
    Limits,
    Named,
    Profile,
    Terms,
    column,
    columns_of,
)
from app.admin_models import AccountCreate, AccountFields, AccountInfo, AccountUpdate
from app.api.routes.accounts import info
from app.client.cli import cli
from app.ledger.accounts import EDITABLE
from app.ledger.database import Database
from app.ledger.schema import ACCOUNTS, AccountRow
from app.usage_models import AccountView
from app.wiring.limits import QUEUE_LIMITS

money = st.integers(0, 10**15).map(lambda micros: micros / 1_000_000)
terms = st.builds(
    Terms,
    description=st.text(max_size=500),
    share=st.floats(0.001, 1000),
    admin=st.booleans(),
    max_queued=st.none() | st.integers(1, 10**6),
    max_running=st.none() | st.integers(1, 10**6),
    max_held_gpu_seconds=st.none() | st.floats(1e-3, 1e12),
    budget_gpu_seconds=st.none() | st.floats(0, 1e12),
    budget_cost=st.none() | money,
)


def names(*models: type[Any]) -> list[str]:
    return [name for model in models for name in model.model_fields]


def test_the_terms_are_the_profile_the_limits_and_the_budgets_in_that_order() -> None:
    assert list(TERMS) == names(Profile, Limits, Budgets)
    assert set(TERMS) == EDITABLE
    assert set(Limits.model_fields) >= QUEUE_LIMITS


def test_each_term_says_what_it_is_for() -> None:  # the API's schema and the CLI's help say it
    assert [name for name, field in Terms.model_fields.items() if not field.description] == []


def test_the_api_holds_an_account_to_each_term() -> None:
    assert names(Account) == ["user_id", *TERMS, "api_keys"]


def test_the_store_has_a_column_for_each_term_money_in_micro_units() -> None:
    kept = [column(name) for name in TERMS]
    assert list(ACCOUNTS.columns.keys()) == ["user_id", *kept, "disabled", "created_at"]
    assert {column(name) for name in MONEY} == {"budget_cost_micros"}
    assert isinstance(ACCOUNTS.columns["budget_cost_micros"].type, sa.BigInteger)


def test_the_migrations_add_each_column(tmp_path: Path) -> None:
    db = Database.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        migrated = [c["name"] for c in sa.inspect(db.engine).get_columns("accounts")]
    finally:
        db.close()
    assert sorted(migrated) == sorted(ACCOUNTS.columns.keys())


def test_admins_set_each_term_and_see_each_one() -> None:
    assert names(AccountFields) == list(TERMS)
    assert names(AccountCreate) == [*TERMS, "user_id"]
    assert names(AccountUpdate) == [*TERMS, "disabled"]
    assert names(AccountInfo) == ["user_id", *TERMS, "disabled", "created_at", "keys"]


def test_the_caller_sees_its_profile_and_its_limits() -> None:
    assert names(AccountView) == [*names(Named, Profile, Limits), "month"]


def test_the_cli_takes_an_option_for_each_term() -> None:
    accounts = typer.main.get_command(cli).commands["admin"].commands["accounts"]  # type: ignore[attr-defined]
    for command in ("create", "update"):
        options = [p.name for p in accounts.commands[command].params]
        assert options == ["user_id", *TERMS, "url", "key", "as_json"]


@given(terms)
def test_terms_come_back_the_same_from_the_store_and_to_admins(given_terms: Terms) -> None:
    values = given_terms.model_dump()
    row = AccountRow(user_id="a", disabled=False, created_at=1.0, **columns_of(values))
    assert row.terms() == given_terms
    shown = info(row, live_keys=2)
    assert shown.model_dump() == {
        "user_id": "a", **values, "disabled": False, "created_at": 1.0, "keys": 2
    }  # fmt: skip
    assert AccountFields.model_validate(values) == AccountFields(**values)


@given(money)
def test_a_cost_budget_is_kept_to_the_micro_unit(cost: float) -> None:
    account = Account(user_id="a", budget_cost=cost)
    assert account.budget_cost_micros == round(cost * 1_000_000)
    from_file = Account(user_id="a", budget_cost_micros=account.budget_cost_micros)
    assert from_file == account


def test_an_account_reads_back_from_the_store_as_it_was_written(tmp_path: Path) -> None:
    db = Database.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        written = columns_of({"share": 2.5, "budget_cost": 12.345678})
        with Session(db.engine) as session, session.begin():
            session.add(AccountRow(user_id="a", disabled=False, created_at=1.0, **written))
        with Session(db.engine) as session:
            row = session.get(AccountRow, "a")
            assert row is not None
            assert (row.terms().share, row.terms().budget_cost) == (2.5, 12.345678)
            assert row.budget_cost_micros == 12_345_678
    finally:
        db.close()
