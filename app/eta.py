"""When a queued job should start: from its place in line, the workers serving its queue and
the queue's recent run times.

The W workers of a queue run its jobs one at a time each. Jobs in flight are taken to be half
done; then each further round of W jobs takes one mean run. A job at position p (0-based) with
F workers free starts now when p < F, else after (0.5 + (p - F) // W) mean runs.
"""

from __future__ import annotations


def wait_s(position: int, in_flight: int, workers: int, mean_run_s: float) -> float | None:
    """Seconds until the job at `position` should start; None when no worker serves its queue."""
    if workers <= 0:
        return None
    free = max(0, workers - in_flight)
    if position < free:
        return 0.0
    return mean_run_s * (0.5 + (position - free) // workers)
