"""The queue's Lua scripts: one file per atomic operation in lua/, each prefixed with _lib.lua.

redis-py's Script runs EVALSHA and, on NOSCRIPT (a restarted or flushed Redis), loads the source
again and retries, so scripts are loaded once and come back by themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.commands.core import AsyncScript, Script
from redis.exceptions import ResponseError

from app.vtrr.errors import from_reply
from app.vtrr.keys import Keys

LUA_DIR = Path(__file__).with_name("lua")
NAMES = (
    "enqueue",
    "dequeue",
    "ack",
    "renew",
    "release",
    "reclaim",
    "cancel",
    "promote",
    "position",
    "positions",
    "triggers",
    "drop",
    "credit",
)


@cache
def source(name: str, directory: Path = LUA_DIR) -> str:
    """The full text of one script: the directory's shared _lib.lua, then the operation."""
    return (directory / "_lib.lua").read_text() + "\n" + (directory / f"{name}.lua").read_text()


#: Where a queue's scripts push Celery triggers themselves: (the key of the stored trigger
#: message, the broker's list). A queue with no such message key never pushes (see _lib.lua).
TriggerKeys = Callable[[], tuple[str, str]]


def no_trigger_push(keys: Keys) -> TriggerKeys:
    """The trigger keys of a queue whose scripts never push: a message key nothing writes."""
    never = f"{keys.triggers}:message:none"
    return lambda: (never, never)


class _Bound:
    """What both kinds of Scripts share: the queue's keys, then the trigger keys of the moment."""

    def __init__(self, keys: Keys, trigger_keys: TriggerKeys | None) -> None:
        self._keys = keys.all()
        self._trigger_keys = trigger_keys or no_trigger_push(keys)

    def keys(self) -> list[str]:
        """Every script's KEYS."""
        return [*self._keys, *self._trigger_keys()]


class Scripts(_Bound):
    """The scripts of one queue, bound to its client and keys."""

    def __init__(self, client: Redis, keys: Keys, trigger_keys: TriggerKeys | None = None) -> None:
        super().__init__(keys, trigger_keys)
        self._scripts: dict[str, Script] = {n: client.register_script(source(n)) for n in NAMES}

    def run(self, name: str, *args: str | int | float) -> Any:
        """Run one script with the queue's keys; Lua error replies become our exceptions."""
        try:
            return self._scripts[name](keys=self.keys(), args=args)
        except ResponseError as exc:
            raise from_reply(exc) from None


class AsyncScripts(_Bound):
    """The same scripts on an asyncio client, for code that must not block its event loop."""

    def __init__(
        self, client: AsyncRedis, keys: Keys, trigger_keys: TriggerKeys | None = None
    ) -> None:
        super().__init__(keys, trigger_keys)
        self._scripts: dict[str, AsyncScript] = {
            n: client.register_script(source(n)) for n in NAMES
        }

    async def run(self, name: str, *args: str | int | float) -> Any:
        """Run one script with the queue's keys; Lua error replies become our exceptions."""
        try:
            return await self._scripts[name](keys=self.keys(), args=args)
        except ResponseError as exc:
            raise from_reply(exc) from None
