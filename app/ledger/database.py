"""Open the SQL database and bring its schema up to date (Alembic's migrations, run at start by
every process that opens it: the first one migrates, the others find nothing to do)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_random

MIGRATIONS = Path(__file__).with_name("migrations")
MIGRATE_TRIES = 5


def alembic_config(url: str) -> Config:
    """Alembic's configuration for the database at url, without an alembic.ini."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


#: The databases this process has migrated already: a process that opens one again (the tests
#: open the API's Runtime once per test) need not ask Alembic a second time.
_migrated: set[str] = set()


@retry(
    retry=retry_if_exception_type((OperationalError, ProgrammingError, IntegrityError)),
    stop=stop_after_attempt(MIGRATE_TRIES),
    wait=wait_random(0.05, 0.5),
    reraise=True,
)
def upgrade(url: str) -> None:
    """Migrate the database at url to the newest schema (once per process). Two processes that
    raced to make a fresh SQLite database's tables: the loser tries again and finds them."""
    if url not in _migrated:
        with _migrating(url):
            command.upgrade(alembic_config(url), "head")
        _migrated.add(url)


@contextmanager
def _migrating(url: str) -> Iterator[None]:
    """For a SQLite file, hold a lock beside it while migrating: its DDL is not transactional
    (pysqlite), so two processes that both read one revision would both run the next, and the
    second's version update would find no row. PostgreSQL's turns are env.py's advisory lock."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        yield
        return
    with open(f"{parsed.database}.migrating", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def make_engine(url: str) -> Engine:
    """An engine for url. SQLite waits for a writer rather than failing at once (the API and
    the workers share the file), and keeps its foreign keys."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(connection: object, _: object) -> None:
            cursor = connection.cursor()  # type: ignore[attr-defined]
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


#: This process's engine of each database. An engine keeps the statements it has compiled, and
#: a process that opens a database again (the tests open the API's Runtime once per test) would
#: compile them all again in a new one; close() empties the pool, and the engine makes another.
_engines: dict[tuple[int, str], Engine] = {}


def _engine(url: str) -> Engine:
    key = (os.getpid(), url)  # a forked child makes its own: connections do not cross a fork
    if key not in _engines:
        _engines[key] = make_engine(url)
    return _engines[key]


class Database:
    """The database of one process: its engine and sessions."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = _engine(url)
        self.sessions: sessionmaker[Session] = sessionmaker(self.engine, expire_on_commit=False)

    @classmethod
    def open(cls, url: str) -> Database:
        """Migrate the database at url, then open it."""
        upgrade(url)
        return cls(url)

    def close(self) -> None:
        """Release the engine's connections."""
        self.engine.dispose()
