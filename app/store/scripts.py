"""The one way into the store's Lua (lua/*.lua, each after _lib.lua): error replies become the
exceptions of app/errors.py here, for the API's asyncio client and the workers' blocking one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.commands.core import AsyncScript, Script
from redis.exceptions import ResponseError

from app.errors import from_reply

LUA_DIR = Path(__file__).with_name("lua")
Args = list[str | int]
#: The scripts that call the run functions of lua/runs.lua (so does the queues' step: hooks.py).
RUNS = ("start", "finish")


def source(name: str) -> str:
    """The text of one script: the helpers of lua/_lib.lua, the run functions where it calls
    them, then the script."""
    parts = ["_lib", *(("runs",) if name in RUNS else ()), name]
    return "\n".join((LUA_DIR / f"{part}.lua").read_text() for part in parts)


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
