"""A worker's heartbeat in Redis: written every heartbeat_seconds from a daemon thread and
whenever the worker starts or ends a job (one record, app/store/workers.py's Seen, encoded there
and read back there), deleted when it stops,
except by a worker whose device broke: its entry stays, marked broken, for operators to see.
Each beat says the worker's place in the fleet (host, class, memory: app/fleet/place.py), so
that the fleet (app/fleet/view.py) is what the heartbeats say, and, while its card is lent to a
job of several cards (app/worker/gangs.py), to which.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

import redis
from redis.exceptions import RedisError

from app.fleet.place import WorkerPlace
from app.store.keys import FLEET, WORKERS
from app.store.workers import Running, Seen

log = logging.getLogger(__name__)


class Presence:
    """Keeps one worker's heartbeat fresh while it runs."""

    def __init__(
        self,
        client: redis.Redis,
        name: str,
        queues: list[str],
        every: float,
        place: WorkerPlace | None = None,
    ) -> None:
        self.client, self.name, self.queues, self.every = client, name, queues, every
        self.place = place  # None: a heartbeat without one, as before the fleet
        self._busy_until: float | None = None
        self._running: Running | None = None
        self._broken: str | None = None
        self._lent_to: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="presence", daemon=True)

    def beat(self) -> None:
        """Write the heartbeat now."""
        seconds, micros = self.client.time()
        now = seconds + micros / 1e6
        entry = Seen(
            self.name, tuple(self.queues), now, self._busy_until, self._broken, self._running
        )
        entry = replace(entry, lent_to=self._lent_to)
        if self.place is not None:
            place = self.place
            entry = replace(
                entry, host=place.host, gpu_class=place.gpu_class, memory_gb=place.memory_gb
            )
        encoded = entry.encode()
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hset(WORKERS, self.name, encoded)
            pipe.hset(FLEET, self.name, encoded)  # kept when it stops: its place in the fleet
            pipe.execute()

    def busy(self, for_s: float | None, run: Running | None = None) -> None:
        """Say that a job started and should end in `for_s` seconds (the run being `run`, its
        `since` stamped now), or, with None, that the worker is idle again; written at once, so
        estimates and the preemption policy see it. Times are stamped on Redis's clock, as
        every time that processes compare (this host's may be off)."""
        try:
            if for_s is None:
                self._busy_until, self._running = None, None
            else:
                seconds, micros = self.client.time()
                now = seconds + micros / 1e6
                self._busy_until = now + for_s
                if run is not None:
                    self._running = replace(run, since=now)
            self.beat()
        except RedisError:
            log.warning("heartbeat of %s not written; the next beat retries", self.name)

    def lent(self, task_id: str | None) -> None:
        """Say to which job of several cards this worker's card is lent (None: to none now);
        written at once, as a lend is a change of what the worker does."""
        self._lent_to = task_id
        try:
            self.beat()
        except RedisError:
            log.warning("heartbeat of %s not written; the next beat retries", self.name)

    def broken(self, why: str) -> None:
        """Say that the worker's device is unusable and it takes no more jobs; written at once,
        and kept when the worker stops."""
        self._broken, self._busy_until, self._running = why, None, None
        try:
            self.beat()
        except RedisError:
            log.warning("could not mark %s broken", self.name)

    def start(self) -> None:
        """Beat now and then every `every` seconds, in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and say goodbye (a worker that dies just stops beating)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.every)
        if self._broken is not None:
            return  # the entry says why this worker is gone
        try:
            self.client.hdel(WORKERS, self.name)
        except RedisError:
            log.warning("could not remove the heartbeat of %s", self.name)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
            except RedisError:
                log.warning("heartbeat of %s not written; retrying", self.name, exc_info=True)
            self._stop.wait(self.every)
