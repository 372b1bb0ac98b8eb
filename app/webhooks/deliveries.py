"""The sender's side of Redis: the deliveries the job scripts hand over, their schedule, and
their outcomes.

A script that ends a job with a webhook adds the job's id to the WEBHOOKS stream, atomically with
the end. A sender reads the stream with a consumer group and moves each entry into its account's
schedule (the job's owner's; due now) in one step (accept.lua); an entry read by a sender that
died before that step is claimed by another after RECLAIM_IDLE_MS (XAUTOCLAIM). From the
schedules, a sender claims what is due for HOLD_MS (claim.lua): no other sender takes it
meanwhile, and the sender's slots are shared fairly between the accounts that have deliveries
due (claim.lua says how). settle.lua then records the outcome: done, due again after a pause
that doubles, or given up. What a sender of an earlier version left in its one schedule for all
accounts is moved into the accounts' own (adopt.lua).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from app.store.keys import (
    METRICS,
    WEBHOOKS,
    WEBHOOKS_ACCOUNTS,
    WEBHOOKS_FAILED,
    WEBHOOKS_LEGACY_DUE,
    job_key,
    webhooks_due_key,
)
from app.store.scripts import constants_lua
from app.vtrr.lua_text import source
from app.vtrr.wire import as_text

LUA_DIR = Path(__file__).with_name("lua")
GROUP = "senders"
#: An entry read and not yet scheduled for this long belongs to a sender that died.
RECLAIM_IDLE_MS = 30_000
#: How long a claimed delivery is a sender's alone: well past its longest attempt.
HOLD_MS = 60_000
FIRST_PAUSE_MS = 1_000
LONGEST_PAUSE_MS = 3_600_000
BATCH = 100
#: The prefixes the scripts complete with an account, or a job's id.
SCHEDULE_PREFIX = webhooks_due_key("")
JOB_PREFIX = job_key("")

Outcome = Literal["delivered", "failed", "gone"]
Entries = list[tuple[Any, Any]]


@dataclass(frozen=True)
class Claim:
    """A delivery this sender holds: the job's id, its account, and the end of the hold (the
    fence)."""

    task_id: str
    account: str
    held_until_ms: int


@dataclass(frozen=True)
class Claimed:
    """What claim() took, and how soon the next delivery it left is due (None: none waits)."""

    claims: list[Claim]
    next_due_s: float | None


@dataclass(frozen=True)
class Settled:
    """What became of a delivery: delivered, gone, given_up, retry (after pause_s), or stale
    (its hold had run out, and the outcome was not recorded)."""

    state: str
    attempts: int = 0
    pause_s: float = 0.0


class Deliveries:
    """The deliveries of webhooks in Redis, as one sender (the consumer) sees them."""

    def __init__(self, client: aioredis.Redis, consumer: str, max_attempts: int) -> None:
        self.redis = client
        self.consumer = consumer
        self._max_attempts = max_attempts
        self._scripts = {  # after the store's constants: the metrics' fields (settle.lua)
            name: client.register_script(f"{constants_lua()}\n{source(name, LUA_DIR)}")
            for name in ("accept", "claim", "settle", "adopt")
        }

    async def intake(self, block_ms: int) -> int:
        """Schedule the ended jobs the stream has for this sender, waiting up to block_ms for
        one; how many were scheduled."""
        streams = {WEBHOOKS: ">"}
        read = await self._grouped(
            self.redis.xreadgroup, GROUP, self.consumer, streams, count=BATCH, block=block_ms
        )
        entries: Entries = [entry for _, batch in read or [] for entry in batch]
        return await self._accept(entries)

    async def reclaim(self) -> int:
        """Schedule what dead senders read and never scheduled; how many."""
        reply = await self._grouped(
            self.redis.xautoclaim, WEBHOOKS, GROUP, self.consumer, RECLAIM_IDLE_MS, count=BATCH
        )
        return await self._accept(list(reply[1]) if reply else [])

    async def claim(self, free: int, slots: int, holding: Mapping[str, int]) -> Claimed:
        """Hold up to `free` due deliveries for this sender, which has `slots` in all and holds
        `holding` of them per account: each goes to the account holding the fewest, none past
        its share (claim.lua)."""
        args: list[str | int] = [free, HOLD_MS, slots]
        for account, count in holding.items():
            args += [account, count]
        reply = await self._scripts["claim"](keys=[WEBHOOKS_ACCOUNTS, SCHEDULE_PREFIX], args=args)
        held, wait = int(reply[0]), int(reply[1])
        pairs = zip(reply[2::2], reply[3::2], strict=True)
        claims = [Claim(as_text(task_id), as_text(account), held) for account, task_id in pairs]
        return Claimed(claims, None if wait < 0 else wait / 1000)

    async def settle(self, claim: Claim, outcome: Outcome) -> Settled:
        """Record how a delivery went."""
        keys = [webhooks_due_key(claim.account), WEBHOOKS_ACCOUNTS, WEBHOOKS_FAILED, METRICS]
        args: list[str | int] = [claim.task_id, claim.held_until_ms, outcome]
        args += [self._max_attempts, FIRST_PAUSE_MS, LONGEST_PAUSE_MS, claim.account]
        reply = await self._scripts["settle"](keys=keys, args=args)
        state = as_text(reply[0])
        attempts = int(reply[1]) if len(reply) > 1 else 0
        pause_s = int(reply[2]) / 1000 if len(reply) > 2 else 0.0
        return Settled(state, attempts, pause_s)

    async def adopt(self) -> int:
        """Move what a sender of an earlier version scheduled into the accounts' schedules, a
        batch at a time; how many."""
        moved = 0
        keys = [WEBHOOKS_LEGACY_DUE, WEBHOOKS_ACCOUNTS, SCHEDULE_PREFIX, JOB_PREFIX]
        while True:
            batch: list[bytes] = await self.redis.zrange(  # type: ignore[assignment]
                WEBHOOKS_LEGACY_DUE, 0, BATCH - 1
            )
            if not batch:  # each call takes its batch out, whoever had moved it
                return moved
            moved += int(await self._scripts["adopt"](keys=keys, args=batch))

    async def _accept(self, entries: Entries) -> int:
        if not entries:
            return 0
        args: list[str] = [GROUP]
        for entry_id, fields in entries:
            job_id = (fields or {}).get(b"task_id", b"")  # none: deleted while it was pending
            args += [as_text(entry_id), as_text(job_id)]
        keys = [WEBHOOKS, WEBHOOKS_ACCOUNTS, SCHEDULE_PREFIX, JOB_PREFIX]
        return int(await self._scripts["accept"](keys=keys, args=args))

    async def _grouped(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        """A group command; when Redis has no group (the first start, or Redis lost its data),
        the group (and its stream) is made, reading from the stream's start, and the command
        sent again."""
        try:
            return await command(*args, **kwargs)
        except ResponseError as exc:
            if not str(exc).startswith("NOGROUP"):
                raise
        try:
            await self.redis.xgroup_create(WEBHOOKS, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):  # another sender made it meanwhile
                raise
        return await command(*args, **kwargs)
