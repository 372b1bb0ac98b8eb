"""Accounts' sharing rules on the fair queues: `max_running` and `max_held_gpu_seconds` are the
queues' per-partition limits (app/vtrr/limits.py), counted over both queues as one limits group,
so that an account's jobs in flight are counted wherever they run. `max_running` counts the
cards its running jobs hold: a job of N cards counts N.

Who sets them: each API process at its start, for every account (so that the accounts file's
limits hold before the first lease), and the admin endpoints when an account changes (every
lease after the answer). Who wakes: every worker runs a Waker, which lets an account start its
next job as soon as its running ones have run down far enough (or ended in the other queue),
within WAKE_POLL_S: no idle worker sits while a job that may start waits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from redis.exceptions import RedisError

from app.auth import Account
from app.models import Kind
from app.vtrr import FairQueue, Limits, wake_together
from app.vtrr.aio import AsyncFairQueue
from app.wiring.loop import Loop
from app.wiring.service import WEIGHT_PER_S, held_limit_weight

log = logging.getLogger(__name__)
#: The terms of an account (app/account.py Limits) that its fair queues enforce at each lease.
QUEUE_LIMITS = frozenset({"max_running", "max_held_gpu_seconds"})
#: Longest a Waker sleeps between two wakes, whatever the queues said (an account's jobs may
#: end in another queue meanwhile): the most an eligible job may wait for it.
WAKE_POLL_S = 0.2


def limits_for(account: Account) -> Limits:
    """An account's limits as its fair queues keep them (weights in GPU-milliseconds, a job's
    being its cards x its milliseconds, used up at WEIGHT_PER_S a card while a job runs)."""
    held = account.max_held_gpu_seconds
    return Limits(
        most_in_flight=account.max_running,
        most_held=None if held is None else held_limit_weight(held),
        weight_per_second=WEIGHT_PER_S,
    )


async def apply(queues: Mapping[Kind, AsyncFairQueue], account: Account) -> dict[Kind, int]:
    """Set (or clear) an account's limits on both queues; the triggers each asks to publish."""
    limits = limits_for(account)
    return {kind: await queue.set_limits(account.user_id, limits) for kind, queue in queues.items()}


async def apply_all(
    queues: Mapping[Kind, AsyncFairQueue], accounts: Iterable[Account]
) -> dict[Kind, int]:
    """Set the limits of every account that has some, and clear those the queues keep for
    accounts that no longer have any (or no longer exist); the triggers to publish."""
    triggers = dict.fromkeys(queues, 0)
    kept: set[str] = set()
    for queue in queues.values():
        kept |= await queue.limited()
    for account in accounts:
        limits = limits_for(account)
        if limits.none and account.user_id not in kept:
            continue
        kept.discard(account.user_id)
        for kind, n in (await apply(queues, account)).items():
            triggers[kind] += n
    for gone in kept:
        for kind, queue in queues.items():
            triggers[kind] += await queue.set_limits(gone, Limits())
    return triggers


class Waker(Loop):
    """A thread that wakes the queues of the limits group: at the end of an account's wait for
    time, and at least every WAKE_POLL_S for jobs ended in the other queue."""

    def __init__(self, queues: Sequence[FairQueue], poll_s: float = WAKE_POLL_S) -> None:
        super().__init__("limits-waker")
        self._queues = list(queues)
        self._poll_s = poll_s

    def step(self) -> float:
        """Wake once; the pause until the next wake."""
        try:
            woken = wake_together(self._queues)
        except RedisError:
            log.warning("the limits waker could not reach Redis", exc_info=True)
            return self._poll_s
        return self._poll_s if woken.next_in is None else min(self._poll_s, woken.next_in)
