"""A fresh stack starts its API and its workers at once, and each migrates the database at start:
processes racing on a fresh database all start, and leave one schema."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app.ledger.database import Database
from app.ledger.schema import Base
from tests.ledger.conftest import empty_database

pytestmark = pytest.mark.integration  # processes of their own
PROCESSES = 4
MIGRATE = "import sys; from app.ledger.database import upgrade; upgrade(sys.argv[1])"


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a database that no process has migrated yet."""
    with empty_database(request.param, tmp_path) as url:
        yield url


def test_processes_migrating_a_fresh_database_at_once_all_start(fresh_url: str) -> None:
    racers = [
        subprocess.Popen([sys.executable, "-c", MIGRATE, fresh_url], stderr=subprocess.PIPE)
        for _ in range(PROCESSES)
    ]
    ended = [(p.communicate(timeout=120)[1].decode(), p.returncode) for p in racers]
    assert [err for err, code in ended if code != 0] == []
    db = Database(fresh_url)
    try:
        with db.engine.connect() as connection:
            assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
    finally:
        db.close()
