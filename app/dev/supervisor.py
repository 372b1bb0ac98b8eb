"""Keep the dev stack's processes running, as Compose's `restart: unless-stopped` does.

    Backoff       the wait before a restart: doubled at each death, reset after a steady run
    RedisWatch    says once that Redis is down, and once that it is back
    Slot          one thing to keep running: how to see it died, how to start it again
    Supervisor    a thread that polls the slots and Redis, and restarts what died

Each death is one log line, each Redis outage two (down, back): a person reads the console, so
an outage must not print a traceback every round of the reclaim timer.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

#: How often the supervisor looks: quick enough that a restart follows a death at once.
TICK_S = 0.25


@dataclass
class Backoff:
    """The wait before a restart: first_s, doubled at each death, at most max_s; back to first_s
    once the process has run steady_s (Docker's policy, so a crash loop slows down and a rare
    crash is healed at once)."""

    first_s: float = 0.5
    max_s: float = 30.0
    steady_s: float = 10.0
    _next_s: float = field(default=0.0, init=False)

    def after_death(self, ran_s: float) -> float:
        """The wait before restarting a process that died after running ran_s seconds."""
        if ran_s >= self.steady_s or self._next_s == 0.0:
            self._next_s = self.first_s
        delay = self._next_s
        self._next_s = min(self._next_s * 2, self.max_s)
        return delay


class RedisWatch:
    """Whether Redis answers, said in one line when that changes and never in between."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._down = False
        self._lock = threading.Lock()

    @property
    def is_down(self) -> bool:
        """Whether the last word about Redis was that it is down."""
        return self._down

    def down(self, why: str) -> None:
        """Redis failed: log "Redis down: why" unless it is already known to be down."""
        with self._lock:
            if self._down:
                return
            self._down = True
        log.warning("Redis down: %s", one_line(why))

    def up(self) -> None:
        """Redis answered: log that it is back if it was down."""
        with self._lock:
            if not self._down:
                return
            self._down = False
        log.warning("Redis back: %s answers again", self.url)


@dataclass
class Slot:
    """One process to keep running. poll gives its exit code (None while it runs); restart
    starts it again; with redis, its death is reported as Redis being down."""

    name: str
    poll: Callable[[], int | None]
    restart: Callable[[], object]
    redis: bool = False


@dataclass
class _State:
    backoff: Backoff
    started_at: float = field(default_factory=time.monotonic)
    restart_at: float | None = None  # set while it is dead and waiting for its restart


class Supervisor:
    """A thread that restarts the slots that die, with backoff, and watches Redis.

    slots() is asked again at each tick, so a process the stack stops on purpose (it leaves the
    list first) is never restarted; ping() says whether Redis answers."""

    def __init__(
        self,
        slots: Callable[[], list[Slot]],
        redis: RedisWatch,
        ping: Callable[[], bool],
        lock: threading.RLock,
        *,
        tick_s: float = TICK_S,
        backoff: Callable[[], Backoff] = Backoff,
    ) -> None:
        self._slots = slots
        self._tick_s = tick_s
        self._backoff = backoff  # a new one per slot
        self._redis = redis
        self._ping = ping
        self._lock = lock  # held by the stack while it adds or removes a process
        self._states: dict[str, _State] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)

    def start(self) -> None:
        """Start watching."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching, and wait until no restart is under way."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._tick_s):
            with self._lock:
                slots = self._slots()
                for slot in slots:
                    if self._stop.is_set():
                        return
                    self._tend(slot, time.monotonic())
                self._states = {
                    s.name: self._states[s.name] for s in slots if s.name in self._states
                }
            self._check_redis([s for s in slots if s.redis])

    def _tend(self, slot: Slot, now: float) -> None:
        state = self._states.setdefault(slot.name, _State(self._backoff()))
        if state.restart_at is None:
            code = slot.poll()
            if code is None:
                return
            delay = state.backoff.after_death(now - state.started_at)
            state.restart_at = now + delay
            said = f"{slot.name} exited ({exit_reason(code)}); restarting it in {delay:g} s"
            if slot.redis:
                self._redis.down(said)
            else:
                log.warning("%s", said)
        elif now >= state.restart_at:
            try:
                slot.restart()
            except (OSError, RuntimeError, TimeoutError) as exc:
                delay = state.backoff.after_death(0.0)
                state.restart_at = now + delay
                log.warning(
                    "%s did not start: %s; next try in %g s", slot.name, one_line(str(exc)), delay
                )
                return
            state.started_at, state.restart_at = time.monotonic(), None

    def _check_redis(self, ours: list[Slot]) -> None:
        """Ping Redis. A Redis of our own that is dead, or waiting for its restart, is not
        pinged: its slot says why it is down, once, at the next tick."""
        if any(s.poll() is not None or self._states[s.name].restart_at is not None for s in ours):
            return
        if self._ping():
            self._redis.up()
        elif not any(s.poll() is not None for s in ours):  # it may have died during the ping
            self._redis.down(f"{self._redis.url} does not answer; waiting for it")


def exit_reason(code: int) -> str:
    """An exit code for people: "exit code 1", or "killed by SIGKILL" for a signal."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def one_line(text: str) -> str:
    """Text on one line, its whitespace runs collapsed: a log line stays one line."""
    return " ".join(text.split())
