"""Short first: which queue a worker that serves both runs next.

A short GPU-second costs twice a long one, and this is what it buys: while both queues wait, a
worker serving both takes a short job before a long one, except that every LONG_EVERY-th
dispatch goes to long, so a steady stream of short jobs cannot starve it. Whose job runs next
within a queue stays that queue's fair order. The count of short jobs that passed a waiting
long one is this worker's own, in memory: two such workers each give long its turn, and a
restarted worker counts again from zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.models import Kind
from app.vtrr import VTRRQueue


def order(passed: int, long_every: int) -> list[Kind]:
    """The queues to lease from, preferred first (the first with a job queued runs), given how
    many short jobs were taken while a long one waited since the last long one: short, until
    long's turn is due. (With no short job queued, a waiting long one runs anyway.)"""
    return ["long", "short"] if passed + 1 >= long_every else ["short", "long"]


class ShortFirst:
    """The policy of a worker that serves both queues: a trigger of either runs what it picks
    (app.vtrr.serve_together's Policy)."""

    def __init__(self, queues: dict[Kind, VTRRQueue], long_every: int) -> None:
        if long_every < 1:
            raise ValueError(f"long_every must be at least 1, got {long_every}")
        self.queues, self.long_every = queues, long_every
        self.passed = 0  # short jobs taken while a long one waited, since the last long one

    def order(self, trigger: VTRRQueue) -> Sequence[VTRRQueue]:
        """Short first, unless long's turn is due; whichever queue's trigger runs."""
        return [self.queues[kind] for kind in order(self.passed, self.long_every)]

    def took(self, queue: VTRRQueue | None, queued: Mapping[str, int]) -> None:
        """Count a short job taken while a long one waited; a long one starts the count again."""
        if queue is self.queues["long"]:
            self.passed = 0
        elif queue is self.queues["short"] and queued[self.queues["long"].name] > 0:
            self.passed += 1
