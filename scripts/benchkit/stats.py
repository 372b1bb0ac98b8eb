"""The one definition of a percentile in the benchmarks, and the few statistics built on it.

Every p50, p95 and p99 that a script prints is `percentile`: `statistics.quantiles` with
method="inclusive", which interpolates linearly between the two nearest ranks (numpy's
default, R's type 7). "inclusive" because a run's samples are all there is to describe: every
percentile then lies between the smallest and the largest sample, whereas "exclusive" would
extrapolate beyond the largest one for p99 of fewer than 99 samples (a --quick run).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence


def percentile(values: Sequence[float], q: int) -> float:
    """The q-th percentile (q a whole number, 1..99) of values; nan for no values."""
    if not 1 <= q <= 99:
        raise ValueError(f"percentiles are whole numbers from 1 to 99, not {q}")
    if len(values) < 2:  # quantiles() wants two points before Python 3.13
        return float(values[0]) if values else math.nan
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def median(values: Sequence[float]) -> float:
    """percentile(values, 50), the same number as statistics.median; nan for no values."""
    return percentile(values, 50)


def ratio(mine: float, base: float) -> float:
    """mine / base, or nan when there is no baseline value."""
    return mine / base if base else math.nan


def alternate(rounds: int, names: Sequence[str]) -> Iterator[tuple[int, str]]:
    """(round, variant) in an order that alternates, reversed every other round (ABBA...), so
    a drift in the machine's load hits every variant alike."""
    for index in range(rounds):
        order = names if index % 2 == 0 else list(reversed(names))
        for name in order:
            yield index, name
