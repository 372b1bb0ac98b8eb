"""The histogram contract between the job scripts and the metrics reader: app/lua/_lib.lua and
app.metrics name the same buckets the same way, checked with Redis's own Lua."""

from __future__ import annotations

import re

import pytest
import redis

from app.api.collector import BUCKETS, bucket_label, histogram_buckets, read_counters
from app.store.keys import METRICS
from app.store.scripts import LUA_DIR

LIB = (LUA_DIR / "_lib.lua").read_text()


def lua_buckets_text() -> str:
    """The text between the braces of `local BUCKETS = {...}` in _lib.lua."""
    match = re.search(r"^local BUCKETS = \{([^}]*)\}", LIB, re.MULTILINE)
    assert match is not None, "no `local BUCKETS = {...}` in _lib.lua"
    return match.group(1)


def test_the_lua_bucket_list_is_the_python_one() -> None:
    bounds = [float(x) for x in lua_buckets_text().split(",")]
    assert bounds == [float(b) for b in BUCKETS]
    assert bounds == sorted(set(bounds))


def test_each_bucket_label_is_what_lua_tostring_writes(r: redis.Redis) -> None:
    script = f"""
    local BUCKETS = {{{lua_buckets_text()}}}
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
    observe = LIB + "\nobserve(ARGV[1], 'wait', 'short', tonumber(ARGV[2]))\nreturn 1"
    for v in VALUES:
        r.eval(observe, 0, METRICS, repr(float(v)))

    buckets = histogram_buckets(read_counters(r), "wait", "short")
    assert [label for label, _ in buckets] == [*map(bucket_label, BUCKETS), "+Inf"]
    for i, (_, cumulative) in enumerate(buckets[:-1]):
        # Prometheus's le: the observations at most this bound.
        assert cumulative == sum(1 for v in VALUES if v <= BUCKETS[i]), buckets[i]
    assert buckets[-1][1] == len(VALUES)
    assert read_counters(r)["wait_sum:short"] == pytest.approx(sum(VALUES))
    assert histogram_buckets(read_counters(r), "wait", "long")[-1] == ("+Inf", 0.0)
    # No observation was filed under a label the reader does not know.
    known = {f"wait:short:{label}" for label, _ in buckets} | {"wait_sum:short"}
    assert set(read_counters(r)) == known
