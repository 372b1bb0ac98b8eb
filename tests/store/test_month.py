"""The scripts' calendar: the UTC month that a bill counts against (lua/_lib.lua month_of) is
the one Python names for the same time, on both sides of every month's first second."""

from __future__ import annotations

from datetime import UTC, datetime

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.api.budgets import month_of
from app.store.scripts import LUA_DIR, constants_lua
from tests.support import examples

LIB = f"{constants_lua()}\n{(LUA_DIR / '_lib.lua').read_text()}"
MONTH_OF = LIB + "\nreturn month_of(tonumber(ARGV[1]))"
LATEST = datetime(2400, 1, 1, tzinfo=UTC).timestamp()


def lua_month(r: redis.Redis, at: float) -> str:
    reply = r.eval(MONTH_OF, 0, repr(at))
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def test_every_month_starts_at_its_first_second(r: redis.Redis) -> None:
    for year in (1970, 1999, 2000, 2024, 2026, 2100, 2399):
        for month in range(1, 13):
            first = datetime(year, month, 1, tzinfo=UTC).timestamp()
            assert lua_month(r, first) == f"{year:04d}-{month:02d}"
            assert lua_month(r, first - 0.001) == month_of(first - 0.001)


@given(st.floats(min_value=0, max_value=LATEST, allow_nan=False))
@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_scripts_month_is_pythons(r: redis.Redis, at: float) -> None:
    assert lua_month(r, at) == month_of(at)
