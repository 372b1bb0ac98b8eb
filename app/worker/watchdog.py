"""The lease watchdog: a run that can no longer renew its lease stops before the lease expires.

The worker renews a running job's lease from a heartbeat; once the lease lapses, the job is
reclaimed and another worker runs it. A worker that is frozen (SIGSTOP, a stuck host) or cut off
from Redis cannot renew it, and cannot stop its job either: its warm child would go on running
the job beside the rerun. So the child watches the lease itself. The worker tells it, through a
shared lock-free double (a frozen or dead worker cannot leave a lock held), the CLOCK_MONOTONIC
time by which the run must have stopped unless the lease is renewed again: the time it sent the
last renewal that Redis granted, plus the lease, less a margin (margin_s). A thread of the
child (Watchdog) looks at it every WATCH_S while a job runs; once it has passed, it kills the
job's processes (app/worker/reaper.py) and exits the child at once, so nothing of the run goes
on. CLOCK_MONOTONIC is the system's on Linux: both processes read the same clock.

The lease cannot lapse before that time: Redis sets its expiry from its own clock, when the
renewal reaches it, which is after the worker sent it. The margin covers the watchdog's poll,
the kill, and how far the two clocks may drift apart within one lease; so the rerun, which
starts only after the lapse, starts after the stale run is gone. The child imports this module:
keep it light.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import threading
import time
from typing import Any

from app.worker import reaper

#: How often the child looks at the deadline while a job runs.
WATCH_S = 0.05
#: The most the deadline stays ahead of the lease's expiry (the margin, with a long lease).
MARGIN_S = 2.0
#: The child's exit status when its watchdog stopped the run (EX_TEMPFAIL): not a crash of the job.
LEASE_LAPSED_EXIT = 75
NOT_SET = math.inf


def margin_s(lease_seconds: float, heartbeat_seconds: float) -> float:
    """How long before the lease's expiry a run that could not renew it stops: MARGIN_S, but
    never more than half the time a renewal may come late (so a run whose heartbeat keeps up is
    never stopped)."""
    return min(MARGIN_S, (lease_seconds - heartbeat_seconds) / 2)


def shared_deadline(context: Any) -> Any:
    """A double the worker writes and its child reads (a multiprocessing context's RawValue),
    NOT_SET at first."""
    return context.RawValue(ctypes.c_double, NOT_SET)


class Watchdog:
    """The child's side: stops the child once the deadline has passed while a job runs."""

    def __init__(self, deadline: Any) -> None:
        self._deadline = deadline
        #: Whether a job runs now (the child's serving loop sets it around each call).
        self.running = False
        self._thread = threading.Thread(target=self._watch, name="lease-watchdog", daemon=True)

    def start(self) -> Watchdog:
        """Start watching (a child given no deadline is never stopped by it)."""
        if self._deadline is not None:
            self._thread.start()
        return self

    def lapsed(self) -> bool:
        """Whether a job runs past the time its lease had to be renewed by."""
        return self.running and time.monotonic() >= float(self._deadline.value)

    def _watch(self) -> None:
        while not self.lapsed():
            time.sleep(WATCH_S)
        stop_the_run()


def stop_the_run() -> None:
    """Kill every process the job started, say why on stderr (the worker quotes the child's
    last words), and exit the child without running any more of the job's code."""
    reaper.kill_below(os.getpid())
    sys.stderr.write("the run's lease could not be renewed in time: its worker stopped it\n")
    sys.stderr.flush()
    os._exit(LEASE_LAPSED_EXIT)
