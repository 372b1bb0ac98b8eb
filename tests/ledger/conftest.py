"""A fresh, migrated ledger database per test: SQLite in the test's folder, and PostgreSQL where
one is reachable (a database of the test's own, created and dropped here)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from app.ledger.database import Database, alembic_config

#: The server the PostgreSQL tests use; the machine's own runs on the standard port.
POSTGRES = os.environ.get("FAIRGPU_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


def postgres_admin() -> object | None:
    """A connection to the PostgreSQL server that may create databases, or None."""
    try:
        import psycopg

        return psycopg.connect(POSTGRES, autocommit=True, connect_timeout=2)
    except Exception:
        return None


@contextlib.contextmanager
def empty_database(kind: str, folder: Path) -> Iterator[str]:
    """The URL of an empty database of this kind ("sqlite": a file in folder; "postgresql": a
    database of its own on the machine's server, dropped afterwards; skipped where none)."""
    if kind == "sqlite":
        yield f"sqlite:///{folder / 'ledger.db'}"
        return
    admin = postgres_admin()
    if admin is None:
        pytest.skip(f"no PostgreSQL reachable at {POSTGRES.rsplit('@', 1)[-1]}")
    name = f"fairgpu_test_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[attr-defined]
    try:
        yield POSTGRES.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + (
            f"/{name}"
        )
    finally:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')  # type: ignore[attr-defined]
        admin.close()  # type: ignore[attr-defined]


# PostgreSQL is a server of the machine's: with the real-process tests (creating a database
# costs a few tenths of a second, which the unit tier's budget has no room for).
@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A migrated database of each kind."""
    with empty_database(request.param, tmp_path) as url:
        database = Database.open(url)
        try:
            yield database
        finally:
            database.close()


def written_at(url: str, revision: str, rows: str, params: dict[str, object]) -> None:
    """Upgrade an empty database to `revision`, write rows (an INSERT) as that revision's code
    did, then upgrade it to the head: what a migration must carry over."""
    config = alembic_config(url)
    command.upgrade(config, revision)
    old = sa.create_engine(url)
    with old.begin() as connection:
        connection.execute(sa.text(rows), params)
    old.dispose()
    command.upgrade(config, "head")
