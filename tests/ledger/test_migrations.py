"""Each migration on a database that has rows already: 0002 adds the accounts' limits, and every
account, key and audit entry there is stays as it was, without limits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app.ledger.accounts import AccountStore
from app.ledger.database import Database, alembic_config
from app.ledger.schema import Base
from tests.ledger.conftest import empty_database


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database that no migration has touched."""
    with empty_database(request.param, tmp_path) as url:
        yield url


def test_a_database_at_0001_gains_the_limits_and_keeps_its_rows(unmigrated_url: str) -> None:
    config = alembic_config(unmigrated_url)
    command.upgrade(config, "0001")
    old = sa.create_engine(unmigrated_url)
    with old.begin() as connection:  # the rows as 0001's code wrote them
        connection.execute(
            sa.text(
                "INSERT INTO accounts (user_id, description, share, admin, disabled, max_queued,"
                " budget_gpu_seconds, budget_cost_micros, created_at) VALUES"
                " ('team-a', 'Team A', 2.0, false, false, 5, 3600.0, NULL, :now)"
            ),
            {"now": time.time()},
        )
        connection.execute(
            sa.text(
                "INSERT INTO api_keys (digest, user_id, label, created_at) VALUES"
                " (:digest, 'team-a', 'laptop', :now)"
            ),
            {"digest": "ab" * 32, "now": time.time()},
        )
        connection.execute(
            sa.text(
                "INSERT INTO audit (at, actor, action, target, detail) VALUES"
                " (:now, 'seed', 'account.create', 'team-a', '{}')"
            ),
            {"now": time.time()},
        )
    old.dispose()

    command.upgrade(config, "head")

    db = Database(unmigrated_url)
    try:
        with db.engine.connect() as connection:
            assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        store = AccountStore(db)
        row = store.get("team-a")
        assert row is not None
        assert (row.description, row.share, row.max_queued, row.budget_gpu_seconds) == (
            "Team A",
            2.0,
            5,
            3600.0,
        )
        assert (row.max_running, row.max_held_gpu_seconds) == (None, None)  # no limits
        assert [k.label for k in store.keys("team-a")] == ["laptop"]
        assert [e.action for e in store.audit()] == ["account.create"]
        store.update("admin", "team-a", max_running=2, max_held_gpu_seconds=90.0)
        account = store.snapshot().get("team-a")
        assert account is not None
        assert (account.max_running, account.max_held_gpu_seconds) == (2, 90.0)
    finally:
        db.close()


def test_0002_goes_down_again_to_0001(unmigrated_url: str) -> None:
    config = alembic_config(unmigrated_url)
    command.upgrade(config, "head")
    command.downgrade(config, "0001")
    engine = sa.create_engine(unmigrated_url)
    try:
        columns = {c["name"] for c in sa.inspect(engine).get_columns("accounts")}
    finally:
        engine.dispose()
    assert "max_queued" in columns
    assert not columns & {"max_running", "max_held_gpu_seconds"}
