"""The histogram contract between the job scripts and the metrics reader: the scripts' bucket
table and labels are generated from app/store/metrics.py, and what observe() files is what
app/api/collector.py reads, checked with Redis's own Lua."""

from __future__ import annotations

import pytest
import redis

from app.api.collector import histogram_buckets, read_counters
from app.store.keys import METRICS
from app.store.metrics import BEYOND, BUCKETS, Histogram, bucket_label
from app.store.scripts import LUA_DIR, constants_lua

LIB = constants_lua() + "\n" + (LUA_DIR / "_lib.lua").read_text()


def test_the_lua_buckets_and_labels_are_the_python_ones(r: redis.Redis) -> None:
    script = f"""{constants_lua()}
    local bounds, labels = {{}}, {{}}
    for i, bound in ipairs(BUCKETS) do
      bounds[i] = string.format('%.17g', bound)
      labels[i] = BUCKET_LABELS[i]
    end
    return {{bounds, labels}}
    """
    bounds, labels = r.eval(script, 0)  # type: ignore[misc]
    assert [float(b) for b in bounds] == [float(b) for b in BUCKETS]
    assert [label.decode() for label in labels] == [bucket_label(b) for b in BUCKETS]
    assert list(BUCKETS) == sorted(set(BUCKETS))


def test_each_bucket_label_is_what_lua_tostring_writes(r: redis.Redis) -> None:
    """The labels Prometheus has always seen: Lua's own print of each bound."""
    script = f"""{constants_lua()}
    local out = {{}}
    for i, bound in ipairs(BUCKETS) do out[i] = tostring(bound) end
    return out
    """
    written = [x.decode() for x in r.eval(script, 0)]  # type: ignore[union-attr]
    assert written == [bucket_label(b) for b in BUCKETS]


@pytest.mark.parametrize(
    ("bound", "label"), [(0.1, "0.1"), (0.5, "0.5"), (1, "1"), (1.0, "1"), (7200, "7200")]
)
def test_bucket_labels_drop_a_whole_numbers_point(bound: float, label: str) -> None:
    assert bucket_label(bound) == label


# What the scripts' observe() sees: the bounds themselves, just above them, zero, and beyond.
VALUES = [0.0, *BUCKETS, *(b + 1e-6 for b in BUCKETS), 0.05, 42.0, 1e6]


def test_lua_observations_land_in_the_buckets_the_reader_reports(r: redis.Redis) -> None:
    observe = LIB + "\nobserve(ARGV[1], HISTOGRAM_WAIT, 'short', tonumber(ARGV[2]))\nreturn 1"
    for v in VALUES:
        r.eval(observe, 0, METRICS, repr(float(v)))

    buckets = histogram_buckets(read_counters(r), Histogram.WAIT, "short")
    assert [label for label, _ in buckets] == [*map(bucket_label, BUCKETS), BEYOND]
    for i, (_, cumulative) in enumerate(buckets[:-1]):
        # Prometheus's le: the observations at most this bound.
        assert cumulative == sum(1 for v in VALUES if v <= BUCKETS[i]), buckets[i]
    assert buckets[-1][1] == len(VALUES)
    assert read_counters(r)["wait_sum:short"] == pytest.approx(sum(VALUES))
    assert histogram_buckets(read_counters(r), Histogram.WAIT, "long")[-1] == (BEYOND, 0.0)
    # No observation was filed under a label the reader does not know.
    known = {f"wait:short:{label}" for label, _ in buckets} | {"wait_sum:short"}
    assert set(read_counters(r)) == known
