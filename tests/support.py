"""What the process-level tests share: fast settings, demo keys, and polling with a deadline."""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import redis

from app.bill import Bill
from app.dev.processes import wait_until
from app.dev.redis_server import free_port
from app.ledger.database import Database
from app.ledger.outbox import bills_everywhere
from app.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "users.json"
DEMO_KEY = "default_api_key"  # account 1111...
OTHER_KEY = "second_api_key"  # account 2222...
TEAM_KEY = "team_api_key"  # account 3333..., share 2
T = TypeVar("T")
#: A folder in memory, where the machine has one: SQLite waits for the disk at each commit (3 to
#: 18 ms on a 2-core VM's disk, against 0.1 ms here), and the tests commit several times each.
MEMORY = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
#: Whether this run is the unit tier (-m "not integration" over the whole tree), where a quick
#: answer matters most: it generates UNIT_TIER_SHARE of each property test's examples, and
#: Schemathesis leaves out its coverage phase (tests/api/test_schema_fuzz.py). A whole run (CI's,
#: or any run of named files) generates all of them. tests/conftest.py sets it before any test
#: module is imported; the assertions are the same in both.
unit_tier = False
UNIT_TIER_SHARE = 0.1


def examples(full: int) -> int:
    """The examples this run generates for a property test that generates `full` in a whole run."""
    return max(10, round(full * (UNIT_TIER_SHARE if unit_tier else 1.0)))


def fast_settings(**overrides: object) -> Settings:
    """Settings with short leases and a fast reclaim, so recovery takes seconds. A stack made
    with them keeps its SQLite database in its own folder (not the test process's: see
    tests/conftest.py test_database)."""
    base: dict[str, object] = {
        "users_file": FIXTURES,
        "database_url": None,
        "port": free_port(),
        "lease_seconds": 2.0,
        "heartbeat_seconds": 0.5,
        "reclaim_interval_s": 0.5,
    }
    return Settings(**{**base, **overrides})  # type: ignore[arg-type]


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
    """wait_until with the tests' default of 30 s: check()'s first truthy value, or the test
    fails with a TimeoutError."""
    value = wait_until(check, timeout, what)
    assert value is not None  # wait_until returns only a truthy value
    return value


def bills_of(r: redis.Redis, user_id: str, database_url: str | None = None) -> list[Bill]:
    """The account's bills wherever they are (app.ledger.outbox.bills_everywhere): in the
    outbox stream and, given its database, in the SQL ledger."""
    db = None if database_url is None else Database(database_url)
    try:
        return bills_everywhere(r, db, user_id)
    finally:
        if db is not None:
            db.close()


@functools.cache
def test_database() -> Path:
    """This process's SQLite database of accounts and bills: DATABASE_URL for every Settings a
    test makes (never a file of the working tree, nor a database the environment names), emptied
    around each test with Redis (redis_url). Stacks keep theirs in their own folder."""
    return Path(tempfile.mkdtemp(prefix="fairgpu-tests-", dir=MEMORY)) / "fairgpu.db"


def empty_test_database() -> None:
    """Delete every row of the process's database, if a test has made it (migrated tables)."""
    path = test_database()
    if not path.exists():
        return
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as db, db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for table in ("api_keys", "audit", "bills", "accounts"):  # keys name their accounts
            if table in tables:
                db.execute(f"DELETE FROM {table}")


def child_environment() -> dict[str, str]:
    """The environment for a program that a test starts and that makes a stack of its own
    (`fairgpu dev`, the scripts): this process's, less its test database, so that the stack keeps
    its database in its own folder as a user's would."""
    return {name: value for name, value in os.environ.items() if name != "DATABASE_URL"}
