"""The ledger's outbox: how a bill gets from Redis to the SQL ledger exactly once.

The script that ends a job and bills it (finish.lua) also adds the bill to the Redis stream
STREAM, in the same atomic step: a bill is never in Redis without its way to the ledger. A
LedgerWriter reads the stream in a consumer group, inserts the bills (the job id is the key:
a bill inserted twice is one row), and only then acknowledges and deletes their entries. A
writer that dies anywhere in between leaves its entries pending in the group; after IDLE_MS
another writer claims them and writes them again, which changes nothing that was written. So
a crash between Redis and the database loses nothing and doubles nothing.

Until a bill is written it is still an entry of the stream: readers of the ledger add those
(`unwritten`), so a bill is visible as soon as its job has ended. An entry is one field, `bill`,
the JSON that finish.lua writes; app/bill.py's Bill.read reads it, of any release.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

import redis
from redis.exceptions import RedisError, ResponseError
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from app.bill import Bill
from app.ledger import bills
from app.ledger.database import Database
from app.ledger.schema import BILLS
from app.store.keys import LEDGER

STREAM = LEDGER
GROUP = "writers"
BATCH = 200
#: Where bills were kept before the ledger (a list per account): adopt_old_lists() moves them.
OLD_LISTS = "fairgpu:billing:"
#: How long an entry may stay with a writer before another claims it (milliseconds).
IDLE_MS = 30_000
log = logging.getLogger(__name__)


def ensure_group(client: redis.Redis) -> None:
    """Create the writers' group (and the stream) unless it exists."""
    try:
        client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def _decoded(entries: Iterable[Any]) -> list[tuple[str, Bill]]:
    """Stream entries as (id, bill) pairs."""
    out = []
    for entry_id, fields in entries:
        if not fields:
            continue  # deleted meanwhile
        bill = Bill.read(fields.get(b"bill") or fields["bill"])
        out.append((entry_id.decode() if isinstance(entry_id, bytes) else entry_id, bill))
    return out


class LedgerWriter:
    """Moves bills from the stream to the SQL ledger, as one consumer of the writers' group."""

    def __init__(
        self, client: redis.Redis, db: Database, name: str, idle_ms: int = IDLE_MS
    ) -> None:
        self.client, self.db, self.name, self.idle_ms = client, db, name, idle_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write_once(self, block_ms: int | None = None) -> int:
        """Claim entries idle past idle_ms, then read new ones (waiting up to block_ms), write
        them, then acknowledge and delete them; how many bills were new to the ledger."""
        ensure_group(self.client)
        # [next id, entries] on Redis 6.2; Redis 7 adds the ids of entries deleted meanwhile
        claimed: Any = self.client.xautoclaim(STREAM, GROUP, self.name, self.idle_ms, count=BATCH)
        entries = _decoded(claimed[1])
        if not entries:
            reply: Any = self.client.xreadgroup(
                GROUP, self.name, {STREAM: ">"}, count=BATCH, block=block_ms
            )
            streams = reply.items() if isinstance(reply, dict) else reply or []
            entries = [entry for _, found in streams for entry in _decoded(found)]
        if not entries:
            return 0
        with self.db.sessions.begin() as session:
            written = bills.record(session, [bill for _, bill in entries])
        ids = [entry_id for entry_id, _ in entries]
        with self.client.pipeline(transaction=True) as pipe:
            pipe.xack(STREAM, GROUP, *ids)
            pipe.xdel(STREAM, *ids)
            pipe.execute()
        return written

    def adopt_old_lists(self) -> int:
        """Write the bills that releases before the ledger kept in Redis lists (one per account,
        `fairgpu:billing:<user>`) into the ledger, then delete each list once its bills are
        written: idempotent, so any worker may do it at start, and none is lost. How many bills
        were new to the ledger."""
        written = 0
        for key in self.client.scan_iter(match=f"{OLD_LISTS}*", count=500):
            texts: Any = self.client.lrange(key, 0, -1)
            with self.db.sessions.begin() as session:
                written += bills.record(session, [Bill.read(text) for text in texts])
            self.client.delete(key)
        return written

    def start(self) -> None:
        """Write in a thread of its own until close()."""
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            adopted = self.adopt_old_lists()
            if adopted:
                log.info("ledger: %d bills of the Redis billing lists written", adopted)
        except (RedisError, OSError, SQLAlchemyError) as exc:
            log.warning("ledger: the old billing lists are not written yet (%r)", exc)
        while not self._stop.is_set():
            try:
                self.write_once(block_ms=1000)
            except (RedisError, OSError, SQLAlchemyError) as exc:
                log.warning("ledger: bills not written yet (%r); trying again", exc)
                self._stop.wait(1.0)

    def close(self) -> None:
        """Stop the thread (its entries in hand stay pending for the next writer)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def unwritten(client: redis.Redis, user_id: str | None = None) -> list[Bill]:
    """The bills still on their way to the ledger (of one account, or all)."""
    raw: Any = client.xrange(STREAM)
    found = [bill for _, bill in _decoded(raw or [])]
    return [b for b in found if user_id is None or b.user_id == user_id]


def bills_everywhere(
    client: redis.Redis, db: Database | None, user_id: str | None = None
) -> list[Bill]:
    """Every bill of an account (or every account), wherever it is now, for a check of
    exactly-once: each entry of the outbox (so a job billed twice there shows twice) and the
    ledger's rows of the jobs not in it (a bill being written is in both for a moment)."""
    found = unwritten(client, user_id)
    if db is None:
        return found
    streamed = {bill.task_id for bill in found}
    query = select(BILLS)
    if user_id is not None:
        query = query.where(BILLS.c.user_id == user_id)
    with db.sessions() as session:
        rows = bills.read(session, query)
    return found + [row for row in rows if row.task_id not in streamed]
