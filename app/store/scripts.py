"""The one way into the store's Lua (lua/*.lua, each after _lib.lua): error replies become the
exceptions of app/errors.py here, for the API's asyncio client and the workers' blocking one.

What the Python spells too (key prefixes, the statuses that end a job, the metrics' fields and
buckets) is not spelled in the Lua: `constants` names it for the Lua, whose scripts get it as
locals before _lib.lua (tests/store/test_lua_constants.py checks both).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.commands.core import AsyncScript, Script
from redis.exceptions import ResponseError

from app.errors import from_reply
from app.models import Status
from app.store import metrics
from app.store.keys import CHANNEL, LEDGER, MOVES, billed_key, usage_key
from app.vtrr.layout import LuaValue, lua_locals

LUA_DIR = Path(__file__).with_name("lua")
Args = list[str | int]
#: The scripts that call the run functions of lua/runs.lua (so does the queues' step: hooks.py).
RUNS = ("start", "finish", "preempt", "revoke")


def constants() -> dict[str, LuaValue]:
    """The Lua name and value of each constant the store's Lua (and the webhook sender's)
    shares with the Python."""
    return {
        "USAGE": usage_key(""),
        "BILLED": billed_key(""),
        "LEDGER": LEDGER,
        "CHANNEL": CHANNEL,
        "MOVES_SUFFIX": MOVES.removeprefix(CHANNEL),
        "TERMINAL": frozenset(status.value for status in Status if status.terminal),
        "BUCKETS": metrics.BUCKETS,
        "BUCKET_LABELS": [metrics.bucket_label(bound) for bound in metrics.BUCKETS],
        "BEYOND": metrics.BEYOND,
        "HISTOGRAM_SUM": metrics.SUM,
        **{f"HISTOGRAM_{h.name}": h.value for h in metrics.Histogram},
        **{f"METRIC_{c.name}": c.value for c in metrics.Counter},
    }


@cache
def constants_lua() -> str:
    """The constants as Lua locals, for the head of a script."""
    return lua_locals(constants())


def source(name: str) -> str:
    """The text of one script: the constants, the helpers of lua/_lib.lua, the run functions
    where it calls them, then the script."""
    parts = ["_lib", *(("runs",) if name in RUNS else ()), name]
    return "\n".join([constants_lua(), *((LUA_DIR / f"{part}.lua").read_text() for part in parts)])


class Scripts:
    """Some of the store's scripts, on a blocking client."""

    def __init__(self, client: Redis, *names: str) -> None:
        self._client = client
        self._scripts: dict[str, Script] = {n: client.register_script(source(n)) for n in names}

    def run(self, name: str, keys: list[str], args: Args) -> Any:
        """Run one script; its error replies become our exceptions."""
        try:
            return self._scripts[name](keys=keys, args=args)
        except ResponseError as exc:
            raise from_reply(exc) from None

    def run_replicated(
        self, name: str, keys: list[str], args: Args, probe: str, replicas: tuple[int, int]
    ) -> tuple[Any, int]:
        """Run one script, then on the same connection a write of one counter in the hash
        `probe` (so that WAIT covers this call even when the script wrote nothing) and WAIT
        (replicas, milliseconds); returns the script's reply and the replicas that have it."""
        with self._client.pipeline(transaction=False) as pipe:
            self._scripts[name](keys=keys, args=args, client=pipe)
            pipe.hincrby(probe, "replicated_calls", 1)
            pipe.wait(*replicas)
            reply, _, acked = pipe.execute(raise_on_error=False)
        if isinstance(reply, ResponseError):
            raise from_reply(reply)
        if isinstance(acked, Exception):
            raise acked
        return reply, int(acked)


class AsyncScripts:
    """Some of the store's scripts, on an asyncio client."""

    def __init__(self, client: AsyncRedis, *names: str) -> None:
        self._scripts: dict[str, AsyncScript] = {
            n: client.register_script(source(n)) for n in names
        }

    async def run(self, name: str, keys: list[str], args: Args) -> Any:
        """Run one script; its error replies become our exceptions."""
        try:
            return await self._scripts[name](keys=keys, args=args)
        except ResponseError as exc:
            raise from_reply(exc) from None
