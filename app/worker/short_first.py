"""Short first: which queue a worker that serves both runs next.

A short GPU-second costs twice a long one, and this is what it buys: while both queues wait, a
worker serving both takes a short job before a long one, except that every LONG_EVERY-th
dispatch goes to long, so a steady stream of short jobs cannot starve it. Whose job runs next
within a queue stays that queue's fair order. The count of short jobs that passed a waiting
long one is this worker's own, in memory: two such workers each give long its turn, and a
restarted worker counts again from zero.
"""

from __future__ import annotations

from app.models import Kind
from app.vtrr import Taken, VTRRQueue, take_first


def order(short_waiting: bool, long_waiting: bool, passed: int, long_every: int) -> list[Kind]:
    """The queues to lease from, preferred first, given which have jobs queued and how many
    short jobs were taken while a long one waited since the last long one."""
    if long_waiting and (not short_waiting or passed + 1 >= long_every):
        return ["long", "short"]
    return ["short", "long"]


class ShortFirst:
    """The policy of a worker that serves both queues: a trigger of either runs what it picks."""

    def __init__(self, queues: dict[Kind, VTRRQueue], long_every: int) -> None:
        if long_every < 1:
            raise ValueError(f"long_every must be at least 1, got {long_every}")
        self.queues, self.long_every = queues, long_every
        self.passed = 0  # short jobs taken while a long one waited, since the last long one

    def take(self, trigger: VTRRQueue, consumes: bool = True) -> Taken | None:
        """Lease the job this worker should run next, for a run of a trigger of `trigger`
        (the first of its drain consumes the trigger: see app.vtrr.drain)."""
        short, long = self.queues["short"], self.queues["long"]
        with short.redis.pipeline(transaction=False) as pipe:
            pipe.zcard(short.keys.queue)  # O(1), as the lengths are all the choice needs
            pipe.zcard(long.keys.queue)
            short_n, long_n = pipe.execute()
        kinds = order(short_n > 0, long_n > 0, self.passed, self.long_every)
        taken = take_first(trigger, [self.queues[kind] for kind in kinds], consumes)
        if taken is not None:
            if taken.queue is long:
                self.passed = 0
            elif long_n > 0:
                self.passed += 1
        return taken
