"""The limits hash's text, one codec: what the Lua stores from Limits.args() is
Limits.to_text(), and Limits.read gives the limits back (data written before the codec too)."""

from __future__ import annotations

import pytest
import redis

from app.vtrr import FairQueue, Limits
from app.vtrr.limits import limits_of

EXAMPLES = [
    Limits(most_in_flight=2),
    Limits(most_held=3600.0),
    Limits(most_in_flight=1, most_held=0.5, weight_per_second=0.0),
    Limits(most_in_flight=7, most_held=1e12, weight_per_second=1000.0),
    Limits(most_held=1 / 3, weight_per_second=2.5),
]


@pytest.mark.parametrize("limits", EXAMPLES, ids=repr)
def test_what_the_lua_stores_reads_back_as_the_limits_set(r: redis.Redis, limits: Limits) -> None:
    q = FairQueue(r, "jobs")
    q.set_limits("A", limits)
    raw = r.hget(q.keys.limits, "A")
    assert raw is not None
    assert raw.decode() == limits.to_text()
    assert Limits.read(raw) == limits == q.limits("A")


def test_cleared_limits_leave_no_text_and_read_as_none(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    q.set_limits("A", Limits(most_in_flight=3))
    q.set_limits("A", Limits())
    raw = r.hget(q.keys.limits, "A")
    assert raw is None
    assert Limits.read(raw) == Limits() == q.limits("A")


@pytest.mark.parametrize(
    ("text", "limits"),
    [
        ("3 -1 1.0", Limits(most_in_flight=3)),
        ("-1 7200.0 1000.0", Limits(most_held=7200.0, weight_per_second=1000.0)),
        ("2 60.0 0.0", Limits(most_in_flight=2, most_held=60.0, weight_per_second=0.0)),
    ],
)
def test_the_text_the_landed_release_wrote_still_reads(text: str, limits: Limits) -> None:
    assert Limits.read(text) == Limits.read(text.encode()) == limits_of(text) == limits
    assert limits.to_text() == text
