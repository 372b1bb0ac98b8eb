"""The SQL ledger gets every bill exactly once, whatever dies between Redis and the database.

The stack's own worker ends a job and bills it in Redis (the bill goes to the ledger's outbox
stream in the same step), then its ledger writer reads the bill and inserts it into SQLite. Here
the database is locked while that happens, so the writer holds the bill unwritten, and the worker
is SIGKILLed right then. Another worker's writer claims the bill once LEDGER_CLAIM_S has passed
and writes it: one row, the outbox empty, the bill listed once.
"""

from __future__ import annotations

import contextlib
import socket
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from app.dev.stack import Stack
from app.ledger.outbox import GROUP, STREAM
from tests.e2e.conftest import DEMO_KEY, wait_for
from tests.e2e.test_jobs import status, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@contextlib.contextmanager
def locked(database: Path) -> Iterator[None]:
    """The database refusing every other writer (they wait, then fail) until the block ends."""
    connection = sqlite3.connect(database, timeout=30, isolation_level=None)
    try:
        connection.execute("BEGIN EXCLUSIVE")
        yield
    finally:
        connection.execute("ROLLBACK")
        connection.close()


def rows_of(database: Path, task_id: str) -> int:
    with contextlib.closing(sqlite3.connect(database, timeout=30)) as connection:
        (count,) = connection.execute(
            "SELECT count(*) FROM bills WHERE task_id = ?", (task_id,)
        ).fetchone()
    return int(count)


def held_by(r: redis.Redis, consumer: str) -> int:
    """The outbox entries that this writer has read and not acknowledged."""
    for entry in r.xinfo_consumers(STREAM, GROUP):
        if entry["name"] == consumer:
            return int(entry["pending"])
    return 0


def test_a_worker_killed_between_the_bill_and_the_ledger_loses_and_doubles_nothing(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(workers=1, ledger_claim_s=1.0)
    database = stack.workdir / "fairgpu.db"
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    [(name, _)] = stack.workers.items()
    consumer = f"{name}@{socket.gethostname()}"  # the worker's name, its writer's too

    with locked(database):
        task_id = submit(stack, DEMO_KEY)
        wait_for(lambda: status(stack, DEMO_KEY, task_id)["status"] == "SUCCESS", what="the job")
        wait_for(lambda: held_by(r, consumer) == 1, what="the writer holding the bill")
        stack.kill_worker(name)
    assert rows_of(database, task_id) == 0  # not written, not lost: still in the outbox
    listed = httpx.get(f"{stack.url}/billing-records", headers={"X-API-Key": DEMO_KEY}).json()
    assert [bill["task_id"] for bill in listed] == [task_id]

    stack.start_worker("cpu2")
    wait_for(lambda: r.xlen(STREAM) == 0, what="another writer to write the bill")
    assert rows_of(database, task_id) == 1
    listed = httpx.get(f"{stack.url}/billing-records", headers={"X-API-Key": DEMO_KEY}).json()
    assert [bill["task_id"] for bill in listed] == [task_id]
    usage = httpx.get(f"{stack.url}/usage", headers={"X-API-Key": DEMO_KEY}).json()
    assert usage["total"]["jobs"] == 1
