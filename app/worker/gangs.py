"""Lends: a worker's part in jobs of several cards, done from a thread of its own.

Every GANG_TICK_S the thread ticks each fair queue the worker serves (FairQueue.tick): that keeps
its slot (its card on its host) live, places the reservations of the jobs of several cards whose
turn has come, and, where this slot's host can start one now, leases it with this slot leading.
Then it does what the slot's state asks:

- leading a job (Tick.claimed): the lease goes to this worker's own Celery queue (worker_direct:
  app/wiring/celery_app.py), whose message the worker's main thread, which runs every job,
  resumes and runs on the job's cards (app/worker/devices.py);
- lent to a job (Held.role "lent") and not yet said clean: the warm child is retired, so that the
  card's memory is free, and the card is said clean (FairQueue.lend_ready). The heartbeat says to
  which job the card is lent (Presence.lent). A lent slot leases nothing (the fair queue's rule),
  so the worker takes no other job; once the lend ends, its next job starts a warm child again.

A worker that stops leaves its slot (FairQueue.leave); one that dies stops ticking, and its slot
is no longer live seen_ttl_s later. A lease the tick claimed is reclaimed as any other when the
worker dies before running it, which frees every card of its job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from celery.utils.nodenames import default_nodename, worker_direct
from redis.exceptions import RedisError

from app.vtrr import Held, Tick, VTRRQueue
from app.worker.devices import Devices

log = logging.getLogger(__name__)

GANG_TICK_S = 0.5  # how often a worker ticks its queues: a lend or a claim waits this much


class Lends:
    """Ticks a worker's fair queues from a daemon thread, and lends or leads its card."""

    def __init__(
        self,
        queues: Sequence[VTRRQueue],
        devices: Devices,
        worker: str,
        seen_ttl_s: float,
        lent: Callable[[str | None], None] = lambda task_id: None,
        every: float = GANG_TICK_S,
    ) -> None:
        self.queues, self.devices, self.worker = list(queues), devices, worker
        self.seen_ttl_s, self.every = seen_ttl_s, every
        #: Told the job this worker's card is lent to whenever that changes (None: to none).
        self.lent = lent
        self.lent_to: str | None = None
        #: This worker's own Celery queue: its node name as Celery spells it ("celery@" before
        #: a name without "@"), as the worker consumes it.
        self.direct = worker_direct(default_nodename(worker))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lends", daemon=True)

    def tick(self) -> None:
        """One round: tick every queue and do what the slot's state asks (the module's text)."""
        led: set[str] = set()
        lent_to: str | None = None
        for queue in self.queues:
            tick = queue.tick(self.seen_ttl_s)
            led |= self._lead(queue, tick)
            held = tick.held
            if held is not None and held.role == "lent":
                lent_to = held.task_id
                self._lend(queue, held)
        self.devices.led = frozenset(led)
        if lent_to != self.lent_to:
            self.lent_to = lent_to
            self.lent(lent_to)

    def _lead(self, queue: VTRRQueue, tick: Tick) -> set[str]:
        """The jobs this slot leads: the one it holds, and one this tick leased for it, whose
        held lease goes to this worker's own queue. Devices hears of that one first, so that
        the run the message starts asks for its placement."""
        led = {tick.held.task_id} if tick.held is not None and tick.held.role == "lead" else set()
        claimed = tick.claimed
        if claimed is not None:
            led.add(claimed.task_id)
            self.devices.led = self.devices.led | {claimed.task_id}
            task = queue.vtrr_task
            if task is None:  # (a worker's queues run its job tasks: build() decorates them)
                raise RuntimeError(f"queue {queue.name!r} has no task to run its lease")
            task.run_held(claimed, queue=self.direct)
            log.info("leading a job of several cards", extra={"task_id": claimed.task_id})
        return led

    def _lend(self, queue: VTRRQueue, held: Held) -> None:
        """Retire the warm child and say the card is clean, once. The child is retired at every
        tick of a lend (a no-op once it is), even one said clean: a worker restarted on a lent
        card started a warm child of its own. Where a run holds the child (it cannot, on a lent
        slot, but a run would come first), the next tick tries again."""
        retired = self.devices.retire()
        if held.ready or not retired:
            return
        if queue.lend_ready(held.task_id):
            log.info("card lent, its memory free", extra={"task_id": held.task_id})

    def start(self) -> None:
        """Tick now and then every `every` seconds, in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop ticking and leave the slot (a graceful stop: its card is no longer placed)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(self.every, 1.0) * 4)
        for queue in self.queues:
            try:
                queue.leave()
            except RedisError:
                log.warning("the slot of %s was not left; it lapses unseen", self.worker)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except RedisError:
                log.warning("the lends' tick failed; the next one retries", exc_info=True)
            except Exception:  # a bug must not end the thread: the slot would lapse unseen
                log.exception("the lends' tick failed")
            self._stop.wait(self.every)
