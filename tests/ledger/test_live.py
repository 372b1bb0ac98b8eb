"""LiveAccounts: two processes' worth of snapshots follow one store; a revoked key, a disabled
account and a changed share are seen by both as soon as the change is announced, with no
restart, and a missed announcement is made good by the periodic reread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import redis.asyncio as aioredis

from app.auth import Accounts
from app.ledger.accounts import AccountStore
from app.ledger.database import Database
from app.ledger.live import LiveAccounts, announce

DEADLINE_S = 5.0


async def until(condition: Callable[[], bool], what: str) -> None:
    """Poll condition until it holds, or fail after DEADLINE_S."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not condition():
        assert loop.time() < deadline, f"not seen within {DEADLINE_S} s: {what}"
        await asyncio.sleep(0.01)


def test_a_revocation_is_seen_by_every_follower_once_announced(
    db: Database, redis_url: str
) -> None:
    store = AccountStore(db)
    store.create("admin", "team-a", share=1.0)
    key = store.issue_key("admin", "team-a").key

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        first, second = LiveAccounts(store.snapshot), LiveAccounts(store.snapshot)
        tasks = [asyncio.create_task(live.follow(client)) for live in (first, second)]
        try:
            assert first.authenticate(key) is not None and second.authenticate(key) is not None
            store.revoke_key("admin", key_digest(store, "team-a"))
            # the followers subscribe asynchronously: announce until both have heard
            loop = asyncio.get_running_loop()
            deadline = loop.time() + DEADLINE_S
            while first.authenticate(key) or second.authenticate(key):
                assert loop.time() < deadline, "the revocation was not seen by both"
                await announce(client, "team-a")
                await asyncio.sleep(0.05)
            store.update("admin", "team-a", share=4.0)
            await announce(client, "team-a")
            await until(lambda: first.share("team-a") == second.share("team-a") == 4.0, "share")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.aclose()

    asyncio.run(scenario())


def test_a_missed_announcement_is_made_good_by_the_periodic_reread(
    db: Database, redis_url: str
) -> None:
    store = AccountStore(db)
    store.create("admin", "team-b")
    key = store.issue_key("admin", "team-b").key

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        live = LiveAccounts(store.snapshot)
        task = asyncio.create_task(live.follow(client, refresh_s=0.1))
        try:
            store.update("admin", "team-b", disabled=True)  # and nobody announces it
            await until(lambda: live.authenticate(key) is None, "the disabled account")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.aclose()

    asyncio.run(scenario())


def key_digest(store: AccountStore, user_id: str) -> str:
    return store.keys(user_id)[0].digest


def test_a_reread_begun_before_a_newer_snapshot_does_not_put_older_accounts_back(
    db: Database,
) -> None:
    """A slow reread (heard of an earlier change) that ends after a newer snapshot was put in
    hand is dropped; a reread begun after that snapshot is held."""
    store = AccountStore(db)
    store.create("admin", "team-c")
    key = store.issue_key("admin", "team-c").key

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        reading, release = asyncio.Event(), asyncio.Event()
        slow = False

        def load() -> Accounts:
            snapshot = store.snapshot()
            if slow:  # read: now wait, as a read held up in its thread would
                loop.call_soon_threadsafe(reading.set)
                asyncio.run_coroutine_threadsafe(release.wait(), loop).result(DEADLINE_S)
            return snapshot

        live = LiveAccounts(load)
        slow = True
        stale = asyncio.create_task(live.reload())
        await asyncio.wait_for(reading.wait(), DEADLINE_S)  # it has read: the key is live
        store.revoke_key("admin", key_digest(store, "team-c"))
        live.put(store.snapshot())
        assert live.authenticate(key) is None
        release.set()
        await stale
        assert live.authenticate(key) is None  # the older read was dropped
        slow = False
        store.update("admin", "team-c", share=2.0)
        await live.reload()
        assert live.share("team-c") == 2.0  # a read begun later is held

    asyncio.run(scenario())
