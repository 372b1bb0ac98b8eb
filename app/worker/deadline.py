"""Deadline: when a running job must have stopped, and why it was asked to stop.

Three asks stop a run: a stop (whose: the owner's cancel, an operator's, a lost lease or a
hand-back, the run's RunAsks says: app/worker/stops.py), the end of its declared seconds (a
timeout), and, for a preemptible run, the ask to yield its GPU. Each starts a grace
(CANCEL_GRACE_S, TIMEOUT_GRACE_S, PREEMPT_GRACE_S) after which the run is killed. The end names
its reason (end_reason.Why) where the executor knows it: a timeout, a run past its budget, a
yield. The rules, in one place for both executors:

- A later ask never moves a running deadline later: the earliest stands.
- A cancel or a timeout is final: the first of them names the end, and a later one changes
  nothing. Either outranks an ask to yield (a run asked to yield that is then cancelled ends
  REVOKED; one whose seconds run out meanwhile ends `timeout`, as it has none left to resume
  with).
- The grace is for stopping cleanly, never for work: a run that ends past its declared seconds
  (by more than the tolerance, TIMEOUT_TOLERANCE_S) ends `timeout` whatever it returned, unless
  a cancel came first (then it is the cancel's end, REVOKED).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from app.worker.calls import Ended, EndKind
from app.worker.end_reason import Why

#: Why a run was asked to stop.
StopReason = Literal["cancel", "timeout", "preempt"]
#: How a run killed past its deadline ended, by the first ask.
KILLED_END: dict[StopReason, EndKind] = {
    "cancel": "cancelled",
    "timeout": "timeout",
    "preempt": "preempted",
}
#: Why a run killed past its deadline ended, by the first ask (a cancel's: its RunAsks says).
KILLED_WHY: dict[StopReason, Why | None] = {
    "cancel": None,
    "timeout": Why.TIMEOUT,
    "preempt": Why.YIELD,
}
#: A run that ends within this many seconds past its declared seconds has not overrun them: the
#: jitter of ending on time (a sleep's wake-up, a last matrix product, a busy host's scheduling;
#: `burn` ends at its duration_s by design). The most of a run that can go unbilled.
TIMEOUT_TOLERANCE_S = 0.25


@dataclass(frozen=True)
class Asks:
    """What the worker asks of the running job, each polled once per poll: to stop, and (a
    preemptible job only) to yield its GPU."""

    should_stop: Callable[[], bool]
    should_yield: Callable[[], bool]


@dataclass
class Deadline:
    """A run's stop: why it was first asked (None: not yet), the time (monotonic) past which it
    is killed, and the ask whose grace that deadline is."""

    reason: StopReason | None = None
    at: float = math.inf
    by: StopReason | None = None
    grace_s: float = 0.0

    @property
    def final(self) -> bool:
        """Whether the run was asked to end for good (a cancel or a timeout)."""
        return self.reason in ("cancel", "timeout")

    def ask(self, reason: StopReason, now: float, grace_s: float) -> bool:
        """Ask the run to stop for `reason` at `now`, with `grace_s` to do so; whether the ask
        counts (the job must be told): a run asked to end for good is not asked again, and a
        run asked to yield is not asked to yield twice."""
        if self.final or (reason == "preempt" and self.reason is not None):
            return False
        self.reason = reason
        if now + grace_s < self.at:  # never later than a deadline already running
            self.at, self.by, self.grace_s = now + grace_s, reason, grace_s
        return True

    def due(self, now: float) -> bool:
        """Whether the run is past its deadline: it is killed."""
        return now >= self.at

    def overran(self, ended: Ended, budget_s: float, tolerance_s: float) -> Ended:
        """The end of a run that replied by itself: a run asked to stop at the end of its
        budget, or one measured past it by more than tolerance_s, ends `timeout`, whatever it
        returned (its output is not the job's); a run cancelled first keeps the cancel's end."""
        if self.reason == "cancel" or ended.end == "setup":
            return ended
        past = ended.end != "cancelled" and ended.seconds > budget_s + tolerance_s
        if self.reason != "timeout" and not past:
            return ended
        error = (
            f"the job ran past its budget of {budget_s:g} s (it ran {ended.seconds:.2f} s): it "
            "was asked to stop there, and what it did after is not its output"
        )
        why = Why.TIMEOUT if self.reason == "timeout" else Why.OVER_BUDGET
        return replace(ended, end="timeout", output=None, error=error, why=why)

    def killed(self, budget_s: float) -> str:
        """Why a run past its deadline was killed, for its error (named by the ask whose grace
        ran out)."""
        if self.by == "cancel":
            return f"the job did not stop within {self.grace_s:g} s of its cancel: killed"
        if self.by == "preempt":
            return f"the job did not yield within {self.grace_s:g} s of the ask: stopped"
        return (
            f"the job ran past its budget of {budget_s:g} s and did not stop within the grace "
            f"of {self.grace_s:g} s: killed"
        )
