"""Why a run ended before its job returned by itself: one reason for each way, born where it is
known and carried to where the end is recorded (app/worker/ends.py) or put back in line.

- CANCEL: the owner's cancel mark, heard by the run's stop check (stops.py); REVOKED, billed
  (ends.py).
- OPERATOR: an operator's mark, heard the same way; REVOKED already by revoke.lua, unbilled.
- LEASE_LOST: the lease (lease.py): a renewal refused (RunLease.lost, which stops the run); the
  run's end records nothing, the next run's end is the job's (ends.py). A run stopped past the
  time its lease had to be renewed by is the same loss, found after the run: RunLease.check
  gives the lease up and raises LeaseLapsedError, and nothing of the run is written at all.
- HAND_BACK: the worker's shutdown grace ran out (runner.py's timer, through the stop check);
  the job is PENDING again, its attempt given back, unbilled (handback.py).
- YIELD: an ask to yield its GPU, heard by the stop check; the job is PENDING again, its
  seconds kept (yields.py).
- TIMEOUT: its declared seconds ran out and it was asked to stop (deadline.py, child.py);
  FAILURE `timeout`, billed (ends.py).
- OVER_BUDGET: it ended by itself past its declared seconds (deadline.py), or was resumed with
  none left (yields.py); FAILURE `timeout`, billed.
- CHILD_DIED: the process that ran it died (child.py); FAILURE `crashed`, billed.

A stop (the first four) ends the run `cancelled` in the executor, which knows only that it was
asked to stop: the run's stop check (stops.RunAsks) says which stop it was. The others the
executor itself knows, and names on the run's Ended.
"""

from __future__ import annotations

from enum import Enum


class Why(Enum):
    """Why a run ended before its job returned by itself."""

    CANCEL = "cancel"  # its owner asked it to stop
    OPERATOR = "operator"  # an operator stopped it (a dropped queue)
    LEASE_LOST = "lease lost"  # its lease went to another run, or lapsed unrenewed
    HAND_BACK = "hand back"  # its worker shut down: the job goes back in line
    YIELD = "yield"  # it was asked to yield its GPU to a job owed one
    TIMEOUT = "timeout"  # its declared seconds ran out while it ran: it was asked to stop
    OVER_BUDGET = "over budget"  # it ended past its declared seconds, or had none left to run
    CHILD_DIED = "child died"  # the process that ran it died

    @property
    def stop(self) -> bool:
        """Whether the run was stopped from outside (it ends `cancelled` in the executor)."""
        return self in OUTSIDE_STOPS

    @property
    def billed(self) -> bool:
        """Whether a stop bills the seconds the run ran (only the owner's own cancel does)."""
        return self is Why.CANCEL


#: The reasons that stop a run from outside its executor.
OUTSIDE_STOPS = frozenset({Why.CANCEL, Why.OPERATOR, Why.LEASE_LOST, Why.HAND_BACK})


def asked_by(mark: bytes | str | None) -> Why | None:
    """The stop a job's `cancel` mark asks for (revoke.lua writes models.StoppedBy: an operator
    is always named, and a bare flag is an owner's cancel of an older release); None: no one
    asked."""
    if mark is None:
        return None
    text = mark.decode() if isinstance(mark, bytes) else mark
    return Why.OPERATOR if text == "operator" else Why.CANCEL
