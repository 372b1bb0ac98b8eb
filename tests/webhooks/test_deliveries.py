"""The sender's side of Redis, on the suite's Redis: deliveries move from the stream into the
schedule once; a claimed one is no other sender's until its hold runs out; outcomes are fenced
by the hold, counted, and retried after pauses that double until given up."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio as aioredis

from app.settings import Settings
from app.store.keys import METRICS, WEBHOOKS, WEBHOOKS_DUE, WEBHOOKS_FAILED
from app.webhooks import deliveries
from app.webhooks.deliveries import GROUP, Claim, Deliveries

pytestmark = pytest.mark.anyio


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


def make_due(r: redis.Redis, job_id: str) -> None:
    """Bring a scheduled delivery's time forward to now, as the clock would."""
    r.zadd(WEBHOOKS_DUE, {job_id: 0})


async def test_intake_schedules_each_handed_over_job_once_and_empties_the_stream(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    for job_id in ("a", "b"):
        r.xadd(WEBHOOKS, {"task_id": job_id})

    assert await sender(client, "one").intake(block_ms=10) == 2
    assert await sender(client, "one").intake(block_ms=10) == 0

    assert {m.decode() for m in r.zrange(WEBHOOKS_DUE, 0, -1)} == {"a", "b"}
    assert r.xlen(WEBHOOKS) == 0
    assert r.xpending(WEBHOOKS, GROUP)["pending"] == 0


async def test_what_a_dead_sender_read_is_reclaimed_by_another(
    client: aioredis.Redis, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    r.xgroup_create(WEBHOOKS, GROUP, id="0", mkstream=True)
    r.xadd(WEBHOOKS, {"task_id": "a"})
    r.xreadgroup(GROUP, "dead", {WEBHOOKS: ">"})  # read, and never scheduled: it died
    assert await sender(client, "alive").intake(block_ms=10) == 0

    monkeypatch.setattr(deliveries, "RECLAIM_IDLE_MS", 0)  # instead of waiting 30 s
    assert await sender(client, "alive").reclaim() == 1

    assert r.zrange(WEBHOOKS_DUE, 0, -1) == [b"a"]
    assert r.xpending(WEBHOOKS, GROUP)["pending"] == 0


async def test_a_claimed_delivery_is_no_other_senders_and_a_stale_outcome_changes_nothing(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    r.zadd(WEBHOOKS_DUE, {"a": 0})
    one, two = sender(client, "one"), sender(client, "two")

    [claim] = (await one.claim(10)).claims
    assert (await two.claim(10)).claims == []

    # a sender whose hold ran out, and was taken over, holds an older end: refused
    earlier = Claim("a", claim.held_until_ms - deliveries.HOLD_MS)
    assert (await two.settle(earlier, "delivered")).state == "stale"
    assert (await one.settle(claim, "delivered")).state == "delivered"
    assert r.zcard(WEBHOOKS_DUE) == 0
    assert counters(r) == {"webhooks_delivered": 1}


async def test_a_failed_delivery_is_retried_after_pauses_that_double_then_given_up(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    r.zadd(WEBHOOKS_DUE, {"a": 0})
    one = sender(client, "one", max_attempts=3)
    pauses = []
    for _ in range(2):
        [claim] = (await one.claim(10)).claims
        before_ms = now_ms(r)
        settled = await one.settle(claim, "failed")
        assert settled.state == "retry"
        pauses.append(settled.pause_s)
        due_ms = r.zscore(WEBHOOKS_DUE, "a")
        assert due_ms is not None and due_ms >= before_ms + settled.pause_s * 1000
        make_due(r, "a")

    [claim] = (await one.claim(10)).claims
    given_up = await one.settle(claim, "failed")

    assert pauses == [1.0, 2.0]
    assert (given_up.state, given_up.attempts) == ("given_up", 3)
    assert r.zcard(WEBHOOKS_DUE) == 0
    assert r.hlen(WEBHOOKS_FAILED) == 0
    assert counters(r) == {"webhooks_failed": 3, "webhooks_given_up": 1}


async def test_claim_says_when_the_next_delivery_is_due(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    one = sender(client, "one")
    assert (await one.claim(10)).next_due_s is None

    r.zadd(WEBHOOKS_DUE, {"later": now_ms(r) + 600_000})
    claimed = await one.claim(10)

    assert claimed.claims == []
    assert claimed.next_due_s is not None
    assert 0 < claimed.next_due_s <= 600


async def test_a_delivery_whose_job_has_gone_is_dropped_uncounted(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    r.zadd(WEBHOOKS_DUE, {"a": 0})
    one = sender(client, "one")
    [claim] = (await one.claim(10)).claims

    assert (await one.settle(claim, "gone")).state == "gone"
    assert r.zcard(WEBHOOKS_DUE) == 0
    assert counters(r) == {}
    assert (await one.settle(Claim("a", claim.held_until_ms), "failed")).state == "stale"
