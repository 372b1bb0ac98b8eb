"""The sender's side of Redis, on the suite's Redis: deliveries move from the stream into their
accounts' schedules once; a claimed one is no other sender's until its hold runs out; a sender's
slots are shared fairly between accounts; outcomes are fenced by the hold, counted, and retried
after pauses that double until given up."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio as aioredis

from app.settings import Settings
from app.store.keys import (
    METRICS,
    WEBHOOKS,
    WEBHOOKS_ACCOUNTS,
    WEBHOOKS_FAILED,
    WEBHOOKS_LEGACY_DUE,
    job_key,
    webhooks_due_key,
)
from app.webhooks import deliveries
from app.webhooks.deliveries import GROUP, Claim, Deliveries

pytestmark = pytest.mark.anyio
SLOTS = 16
ACCOUNT = "acct-a"


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    made = aioredis.Redis.from_url(settings.redis_url)
    yield made
    await made.aclose()


def sender(client: aioredis.Redis, name: str, max_attempts: int = 3) -> Deliveries:
    return Deliveries(client, name, max_attempts)


def counters(r: redis.Redis) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in r.hgetall(METRICS).items()}


def now_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000


def hand_over(r: redis.Redis, job_id: str, account: str = ACCOUNT) -> None:
    """A job of the account's that has ended with a webhook, as the job scripts leave it."""
    r.hset(job_key(job_id), "owner", account)
    r.xadd(WEBHOOKS, {"task_id": job_id})


async def scheduled(
    client: aioredis.Redis, r: redis.Redis, jobs: dict[str, list[str]] | list[str]
) -> None:
    """The jobs handed over (per account, or of ACCOUNT) and taken into the schedules."""
    per_account = jobs if isinstance(jobs, dict) else {ACCOUNT: jobs}
    for account, job_ids in per_account.items():
        for job_id in job_ids:
            hand_over(r, job_id, account)
    await sender(client, "intake").intake(block_ms=10)


def make_due(r: redis.Redis, job_id: str, account: str = ACCOUNT) -> None:
    """Bring a scheduled delivery's time forward to now, as the clock would."""
    r.zadd(webhooks_due_key(account), {job_id: 0})
    r.zadd(WEBHOOKS_ACCOUNTS, {account: 0})


def schedule_of(r: redis.Redis, account: str = ACCOUNT) -> set[str]:
    return {m.decode() for m in r.zrange(webhooks_due_key(account), 0, -1)}


def by_account(claims: list[Claim]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for claim in claims:
        counted[claim.account] = counted.get(claim.account, 0) + 1
    return counted


async def test_intake_schedules_each_handed_over_job_once_under_its_owner(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    hand_over(r, "a", "acct-a")
    hand_over(r, "b", "acct-b")
    r.xadd(WEBHOOKS, {"task_id": "c"})  # its job has expired: no owner

    assert await sender(client, "one").intake(block_ms=10) == 3
    assert await sender(client, "one").intake(block_ms=10) == 0

    assert (schedule_of(r, "acct-a"), schedule_of(r, "acct-b"), schedule_of(r, "")) == (
        {"a"},
        {"b"},
        {"c"},
    )
    assert {m.decode() for m in r.zrange(WEBHOOKS_ACCOUNTS, 0, -1)} == {"acct-a", "acct-b", ""}
    assert r.xlen(WEBHOOKS) == 0
    assert r.xpending(WEBHOOKS, GROUP)["pending"] == 0


async def test_what_a_dead_sender_read_is_reclaimed_by_another(
    client: aioredis.Redis, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    r.xgroup_create(WEBHOOKS, GROUP, id="0", mkstream=True)
    hand_over(r, "a")
    r.xreadgroup(GROUP, "dead", {WEBHOOKS: ">"})  # read, and never scheduled: it died
    assert await sender(client, "alive").intake(block_ms=10) == 0

    monkeypatch.setattr(deliveries, "RECLAIM_IDLE_MS", 0)  # instead of waiting 30 s
    assert await sender(client, "alive").reclaim() == 1

    assert schedule_of(r) == {"a"}
    assert r.xpending(WEBHOOKS, GROUP)["pending"] == 0


async def test_a_claimed_delivery_is_no_other_senders_and_a_stale_outcome_changes_nothing(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    await scheduled(client, r, ["a"])
    one, two = sender(client, "one"), sender(client, "two")

    [claim] = (await one.claim(10, SLOTS, {})).claims
    assert claim.account == ACCOUNT
    assert (await two.claim(10, SLOTS, {})).claims == []

    # a sender whose hold ran out, and was taken over, holds an older end: refused
    earlier = Claim("a", ACCOUNT, claim.held_until_ms - deliveries.HOLD_MS)
    assert (await two.settle(earlier, "delivered")).state == "stale"
    assert (await one.settle(claim, "delivered")).state == "delivered"
    assert r.exists(webhooks_due_key(ACCOUNT), WEBHOOKS_ACCOUNTS) == 0
    assert counters(r) == {"webhooks_delivered": 1}


async def test_a_failed_delivery_is_retried_after_pauses_that_double_then_given_up(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    await scheduled(client, r, ["a"])
    one = sender(client, "one", max_attempts=3)
    pauses = []
    for _ in range(2):
        [claim] = (await one.claim(10, SLOTS, {})).claims
        before_ms = now_ms(r)
        settled = await one.settle(claim, "failed")
        assert settled.state == "retry"
        pauses.append(settled.pause_s)
        due_ms = r.zscore(webhooks_due_key(ACCOUNT), "a")
        assert due_ms is not None and due_ms >= before_ms + settled.pause_s * 1000
        assert r.zscore(WEBHOOKS_ACCOUNTS, ACCOUNT) == due_ms
        make_due(r, "a")

    [claim] = (await one.claim(10, SLOTS, {})).claims
    given_up = await one.settle(claim, "failed")

    assert pauses == [1.0, 2.0]
    assert (given_up.state, given_up.attempts) == ("given_up", 3)
    assert r.exists(webhooks_due_key(ACCOUNT), WEBHOOKS_ACCOUNTS, WEBHOOKS_FAILED) == 0
    assert counters(r) == {"webhooks_failed": 3, "webhooks_given_up": 1}


async def test_claim_says_when_the_next_delivery_is_due(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    one = sender(client, "one")
    assert (await one.claim(10, SLOTS, {})).next_due_s is None

    later = now_ms(r) + 600_000
    r.zadd(webhooks_due_key(ACCOUNT), {"later": later})
    r.zadd(WEBHOOKS_ACCOUNTS, {ACCOUNT: later})
    claimed = await one.claim(10, SLOTS, {})

    assert claimed.claims == []
    assert claimed.next_due_s is not None
    assert 0 < claimed.next_due_s <= 600


async def test_a_delivery_whose_job_has_gone_is_dropped_uncounted(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    await scheduled(client, r, ["a"])
    one = sender(client, "one")
    [claim] = (await one.claim(10, SLOTS, {})).claims

    assert (await one.settle(claim, "gone")).state == "gone"
    assert r.exists(webhooks_due_key(ACCOUNT), WEBHOOKS_ACCOUNTS) == 0
    assert counters(r) == {}
    assert (await one.settle(Claim("a", ACCOUNT, claim.held_until_ms), "failed")).state == "stale"


async def test_an_account_alone_holds_half_the_slots_and_the_rest_wait_for_no_busy_loop(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    await scheduled(client, r, [f"a{n}" for n in range(40)])
    one = sender(client, "one")

    first = await one.claim(SLOTS, SLOTS, {})
    again = await one.claim(SLOTS // 2, SLOTS, {ACCOUNT: SLOTS // 2})

    assert by_account(first.claims) == {ACCOUNT: SLOTS // 2}
    assert again.claims == []
    # due, yet not this sender's to take: it waits for a slot to end, not for that delivery
    assert again.next_due_s is None


async def test_a_free_slot_goes_to_the_account_that_holds_the_fewest(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    await scheduled(client, r, {"acct-a": [f"a{n}" for n in range(40)]})
    await scheduled(client, r, {"acct-b": ["b0"]})  # due later than every one of acct-a's
    one = sender(client, "one")

    [claim] = (await one.claim(1, SLOTS, {"acct-a": 3})).claims

    assert (claim.account, claim.task_id) == ("acct-b", "b0")


async def test_accounts_with_deliveries_due_share_the_slots_and_leave_some_free(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    await scheduled(client, r, {a: [f"{a}-{n}" for n in range(20)] for a in ("x", "y", "z")})
    one = sender(client, "one")

    claimed = await one.claim(SLOTS, SLOTS, {})

    # three accounts: each up to 16 // (3 + 1), so that a fourth would find a slot free
    assert by_account(claimed.claims) == {"x": 4, "y": 4, "z": 4}
    again = await one.claim(SLOTS - 12, SLOTS, by_account(claimed.claims))
    assert again.claims == []


async def test_a_delivery_scheduled_by_an_earlier_version_is_moved_to_its_account(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    r.hset(job_key("old"), "owner", ACCOUNT)
    r.zadd(WEBHOOKS_LEGACY_DUE, {"old": 0, "expired": 0})
    one = sender(client, "one")

    assert await one.adopt() == 2

    assert r.exists(WEBHOOKS_LEGACY_DUE) == 0
    assert (schedule_of(r), schedule_of(r, "")) == ({"old"}, {"expired"})
    claimed = await one.claim(SLOTS, SLOTS, {})
    assert sorted(claim.task_id for claim in claimed.claims) == ["expired", "old"]
