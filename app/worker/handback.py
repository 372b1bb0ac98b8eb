"""A run's job handed back: returned to its line, PENDING, without an end and unbilled.

Two runs are handed back: one still running when its worker's shutdown grace runs out (a
SIGTERM from Kubernetes, Compose or an operator: end_reason.HAND_BACK, which the run's asks
carry from the runner's timer to its end), and one that no job child could run (the worker
cannot run jobs at all). Its lease goes back to the front of its account's line at once, so
that another worker runs it without waiting for the lease to lapse, and the run is not counted
as one of the job's attempts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from app.store import JobRecorder
from app.vtrr import VTRRQueue
from app.vtrr.celery_queue import UNREACHABLE  # Redis not reached: not the job's failure

log = logging.getLogger(__name__)


def after(grace_s: float, hand_back: Callable[[], None]) -> None:
    """Call hand_back grace_s from now, from a daemon timer thread."""
    timer = threading.Timer(grace_s, hand_back)
    timer.daemon = True
    timer.start()


def give_back(
    recorder: JobRecorder, queue: VTRRQueue, job_id: str, token: str, who: dict[str, str]
) -> str:
    """Return a stopped run's job to PENDING and its lease to the front of its queue; what
    happened, for the worker's log.

    The record first: once the lease is back, another worker may start the job at once, and its
    start would find this run's attempt not yet given back (the job ran twice, counted two
    attempts). If the release then fails, the lease lapses and the job comes back all the
    same."""
    try:
        recorder.handed_back(job_id, token)
        released = queue.release(job_id, token)
    except UNREACHABLE:
        log.warning("Redis unreachable; the job returns when its lease lapses", extra=who)
        return "handed back: its lease will lapse"
    log.info("job handed back", extra={**who, "released": released})
    return "handed back"
