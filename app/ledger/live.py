"""LiveAccounts: the accounts a process authenticates with, kept current without a restart.

Each process keeps its own snapshot of the accounts and their live keys in memory, so that a
request's key is checked without a query. A change (an admin's, through AccountStore) is
announced on the Redis channel CHANGED once its transaction has committed; every process that
follows the channel reads a fresh snapshot at once, so a revoked key stops working within the
time of one read everywhere. A message missed while Redis was away is made good by a reread
every REFRESH_S, and at every reconnection.

What outlives a request watches its key (watch): an open event stream learns from the first
snapshot without the key, or without its account (disabled or removed), that it must end.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from app.auth import Account, Accounts

#: Where changes of accounts and keys are announced (the message is the account's id).
CHANGED = "fairgpu:accounts:changed"
#: How often a process rereads the accounts whatever it heard (seconds).
REFRESH_S = 30.0
log = logging.getLogger(__name__)


@dataclass(eq=False)
class KeyWatch:
    """A key in use by something long-lived; `revoked` once the key no longer admits its
    account, when `wake` is set too."""

    key_digest: str
    user_id: str
    wake: asyncio.Event
    revoked: bool = False


class LiveAccounts:
    """The current snapshot of the accounts, and what is asked of it."""

    def __init__(self, load: Callable[[], Accounts]) -> None:
        self._load = load
        # Each read takes a ticket when it begins; the snapshot in hand is the one of the
        # latest-begun read that has ended. A read that began before it (a slow reread heard of
        # an earlier change) is dropped when it ends, instead of putting older accounts back.
        self._tickets = itertools.count(1)
        self._held = 0
        self._watches: set[KeyWatch] = set()
        self.current = load()

    def put(self, snapshot: Accounts) -> None:
        """Hold this snapshot, read just now, in place of any read begun before it."""
        self._hold(next(self._tickets), snapshot)

    def _hold(self, ticket: int, snapshot: Accounts) -> None:
        if ticket > self._held:
            self._held, self.current = ticket, snapshot
            for watch in self._watches:
                self._check(watch)

    @contextlib.contextmanager
    def watch(self, key_digest: str, user_id: str, wake: asyncio.Event) -> Iterator[KeyWatch]:
        """Watch a key (by its digest) for as long as the block runs: once the snapshot in hand
        no longer has it belong to user_id's enabled account (it was revoked, the account
        disabled or removed), the watch is marked revoked and `wake` is set."""
        watch = KeyWatch(key_digest, user_id, wake)
        self._watches.add(watch)
        self._check(watch)  # a change held since the key was checked
        try:
            yield watch
        finally:
            self._watches.discard(watch)

    def _check(self, watch: KeyWatch) -> None:
        owner = self.current.owner(watch.key_digest)
        if owner is None or owner.user_id != watch.user_id:
            watch.revoked = True
            watch.wake.set()

    def authenticate(self, key: str | None) -> Account | None:
        """The enabled account that owns this live key, or None."""
        return self.current.authenticate(key)

    def get(self, user_id: str) -> Account | None:
        """The enabled account with this id, or None."""
        return self.current.get(user_id)

    def share(self, user_id: str) -> float:
        """An account's share (1 for one the snapshot does not hold)."""
        return self.current.share(user_id)

    def all(self) -> list[Account]:
        """Every enabled account."""
        return self.current.all()

    async def reload(self) -> None:
        """Read a fresh snapshot (off the event loop: it is a database query) and hold it, unless
        a read begun after this one has ended first; while the database cannot be read, the
        snapshot in hand stays (the next change or refresh reads it again)."""
        ticket = next(self._tickets)
        try:
            snapshot = await asyncio.to_thread(self._load)
        except SQLAlchemyError as exc:
            log.warning("accounts: the database is unavailable (%r); keeping those in hand", exc)
            return
        self._hold(ticket, snapshot)

    async def follow(self, client: aioredis.Redis, refresh_s: float = REFRESH_S) -> None:
        """Reload at every announced change and every refresh_s; runs until cancelled, and
        through Redis outages (it reloads once back)."""
        while True:
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(CHANGED)
                    await self.reload()  # whatever changed while not subscribed
                    await self._listen(pubsub, refresh_s)
            except (RedisError, OSError) as exc:
                log.warning("accounts: lost Redis (%r); rereading the accounts meanwhile", exc)
                await asyncio.sleep(1.0)
                await self.reload()

    async def _listen(self, pubsub: aioredis.client.PubSub, refresh_s: float) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + refresh_s
        while True:
            wait = max(0.0, due - loop.time())
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=wait)
            if message is not None or loop.time() >= due:
                await self.reload()
                due = loop.time() + refresh_s


async def announce(client: aioredis.Redis, user_id: str) -> None:
    """Tell every process that an account or its keys changed (after the change committed)."""
    await client.publish(CHANGED, user_id)
