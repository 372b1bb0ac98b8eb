"""Migration 0003 on a database that has accounts already: each gains run_scripts, false (none
may run scripts until an admin says so), and keeps everything else; and it goes down again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from app.ledger.accounts import AccountStore
from app.ledger.database import Database, alembic_config
from tests.ledger.conftest import empty_database


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def test_accounts_there_are_gain_run_scripts_false(unmigrated_url: str) -> None:
    config = alembic_config(unmigrated_url)
    command.upgrade(config, "0002")
    old = sa.create_engine(unmigrated_url)
    with old.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO accounts (user_id, description, share, admin, disabled, max_queued,"
                " max_running, created_at) VALUES ('team-a', 'Team A', 2.0, true, false, 5, 3,"
                " :now)"
            ),
            {"now": time.time()},
        )
    old.dispose()

    command.upgrade(config, "head")

    db = Database(unmigrated_url)
    try:
        store = AccountStore(db)
        account = store.snapshot().get("team-a")
        assert account is not None
        assert (account.share, account.admin, account.max_running) == (2.0, True, 3)
        assert account.run_scripts is False
        store.update("admin", "team-a", run_scripts=True)
        again = store.snapshot().get("team-a")
        assert again is not None and again.run_scripts is True
    finally:
        db.close()
    command.downgrade(config, "0002")
    engine = sa.create_engine(unmigrated_url)
    try:
        columns = {c["name"] for c in sa.inspect(engine).get_columns("accounts")}
    finally:
        engine.dispose()
    assert "max_running" in columns
    assert "run_scripts" not in columns
