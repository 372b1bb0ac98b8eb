"""The one percentile of the benchmarks (scripts/benchkit/stats.py): statistics.quantiles with
method="inclusive", so linear between the nearest ranks and never outside the samples."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scripts.benchkit.stats import alternate, median, percentile

# Integers: the property is about ranks, and whole numbers keep float rounding out of it.
samples = st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=200)


def test_percentile_interpolates() -> None:
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([1, 2, 3, 4], 99) == pytest.approx(3.97)
    assert math.isnan(percentile([], 50))


def test_a_single_sample_is_every_percentile() -> None:
    assert percentile([7.0], 1) == percentile([7.0], 99) == 7.0


def test_percentiles_are_whole_numbers_from_1_to_99() -> None:
    with pytest.raises(ValueError, match="1 to 99"):
        percentile([1, 2], 100)


@given(samples, st.integers(1, 99))
def test_a_percentile_stays_within_the_samples(values: list[int], q: int) -> None:
    assert min(values) <= percentile(values, q) <= max(values)


@given(samples)
def test_the_median_is_statistics_median(values: list[int]) -> None:
    assert median(values) == pytest.approx(statistics.median(values), abs=1e-9)


def test_rounds_alternate_abba() -> None:
    assert list(alternate(2, ["a", "b"])) == [(0, "a"), (0, "b"), (1, "b"), (1, "a")]
