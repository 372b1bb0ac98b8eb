"""The soak's chaos: a thread that SIGKILLs a random live worker every so often and starts a
fresh one under a new name after a pause, as a process manager would; and, under Sentinel, one
that SIGKILLs the Redis primary once."""

from __future__ import annotations

import random
import socket
import threading
import time

from app.dev.sentinels import SentinelSet
from app.dev.stack import Stack


class Chaos(threading.Thread):
    """SIGKILLs a random live worker every so often and starts a fresh one after a pause."""

    def __init__(
        self,
        stack: Stack,
        rng: random.Random,
        every: tuple[float, float],
        restart_after: tuple[float, float],
    ) -> None:
        super().__init__(name="chaos", daemon=True)
        self.stack, self.rng, self.every, self.restart_after = stack, rng, every, restart_after
        self.kills: dict[str, float] = {}  # full worker name (each is used once) -> kill time
        self._halt = threading.Event()
        self._next = len(stack.workers) + 1
        self._host = socket.gethostname()

    def run(self) -> None:
        """Strike until finish() is called."""
        while not self._halt.wait(self.rng.uniform(*self.every)):  # a deliberate pause
            alive = sorted(n for n, p in self.stack.workers.items() if p.poll() is None)
            if not alive:
                continue
            victim = self.rng.choice(alive)
            self.kills[f"{victim}@{self._host}"] = time.time()
            self.stack.kill_worker(victim)
            if self._halt.wait(self.rng.uniform(*self.restart_after)):  # the manager's delay
                return
            self.start_one()

    def start_one(self) -> None:
        """A fresh worker under a name never used before."""
        self.stack.start_worker(f"cpu{self._next}")
        self._next += 1

    def finish(self, workers: int) -> None:
        """Stop striking and bring the stack back to `workers` workers."""
        self._halt.set()
        self.join()
        while len(self.stack.workers) < workers:
            self.start_one()


class PrimaryChaos(threading.Thread):
    """Under Sentinel: SIGKILLs the Redis primary once, `after` seconds in, and starts that
    server again `back_after` seconds later (the Sentinels make it a replica of the new one)."""

    def __init__(self, ha: SentinelSet, after: float, back_after: float) -> None:
        super().__init__(name="primary-chaos", daemon=True)
        self.ha, self.after, self.back_after = ha, after, back_after
        self.killed_at: float | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        if self._halt.wait(self.after):
            return
        victim = self.ha.primary()
        self.killed_at = time.time()
        victim.kill()
        self._halt.wait(self.back_after)
        victim.start()

    def finish(self) -> None:
        self._halt.set()
        self.join()
