"""The fields of the metrics hash (keys.METRICS) that the job scripts and the webhook sender's
count into and app/api/collector.py reads, named once: here (the Lua gets them through
scripts.constants).

A counter's field is its name, then its labels, each after a colon: `finished:<queue>:<status>`,
`attempts:<queue>`, `ended:<type>:<end>`, `billed_micros:<queue>`, `billed_ms:<queue>`; some have
no label. A histogram keeps a field per bucket, `<name>:<queue>:<bound's label>` (a count of
that bucket alone, not cumulative: the reader adds them up), and `<name>_sum:<queue>`.
"""

from __future__ import annotations

from enum import StrEnum


class Counter(StrEnum):
    """The counters the scripts keep."""

    FINISHED = "finished"
    ATTEMPTS = "attempts"
    ENDED = "ended"
    BILLED_MICROS = "billed_micros"
    BILLED_MS = "billed_ms"
    LOG_LINES_DROPPED = "log_lines_dropped"
    WEBHOOKS_DELIVERED = "webhooks_delivered"
    WEBHOOKS_FAILED = "webhooks_failed"
    WEBHOOKS_GIVEN_UP = "webhooks_given_up"
    PREEMPTIONS = "preemptions"


class Histogram(StrEnum):
    """The histograms the scripts keep, of seconds: from submission to a job's first start,
    and of each run."""

    WAIT = "wait"
    RUN = "run"


#: What a histogram's name takes for the field of its sum.
SUM = "_sum"
#: The histograms' bucket bounds, in seconds, and the label of the bucket past the last.
BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)
BEYOND = "+Inf"


def bucket_label(bound: float) -> str:
    """A bucket's bound as its field and Prometheus's `le` write it (1 -> "1", 0.5 -> "0.5")."""
    return str(int(bound)) if float(bound).is_integer() else repr(float(bound))


def field(name: str, *labels: str) -> str:
    """The field of a counter with these labels."""
    return ":".join((name, *labels))
