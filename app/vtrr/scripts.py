"""The way into the queue's Lua (its text is lua_text.py's): a call runs one operation of lua/.

Each operation's header names the keys it touches (`-- KEYS: queue meta ...`, the names of
lua/lib/keys.lua's `K`); a call passes those keys only, in that order, and nothing else is reachable
through `K` (a name it did not declare is an error, not a nil).

Where the server has functions (Redis 7), every operation is one function of a library that
FUNCTION LOAD installs once: the helpers are built when the library loads, not at every call,
and a call is one FCALL. On Redis 6.2, which has none, each operation is a script of its own
(the helpers, then the operation), run with EVALSHA. Either way a server that lost them (a
restart without persistence, FUNCTION FLUSH, SCRIPT FLUSH) gets them again at the next call.
The library's name carries a digest of its text, so processes of two versions of fairgpu can
share a server during an upgrade, each calling its own. What the Python spells too (layout.py)
goes before the helpers, as Lua locals: set once when the library loads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.commands.core import AsyncScript, Script
from redis.exceptions import NoPermissionError, ResponseError

from app.vtrr.errors import NotReplicatedError, from_reply
from app.vtrr.keys import Keys
from app.vtrr.lua_text import (
    NAMES,
    NO_HOOKS,
    QUEUE_KEYS,
    TRIGGER_KEYS,
    function_name,
    library_source,
    operation,
    script_source,
)
from app.vtrr.replicated import Replicas

#: What a server without functions answers FUNCTION LOAD (Redis 6.2).
_NO_FUNCTIONS = ("unknown command", "ERR unknown command")
_FUNCTION_GONE = "Function not found"
_LIBRARY_EXISTS = "already exists"


#: Where a queue's scripts push Celery triggers themselves: (the key of the stored trigger
#: message, the broker's list). A queue with no such message key never pushes
#: (see lua/lib/triggers.lua).
TriggerKeys = Callable[[], tuple[str, str]]


def no_trigger_push(keys: Keys) -> TriggerKeys:
    """The trigger keys of a queue whose scripts never push: a message key nothing writes."""
    never = f"{keys.triggers}:message:none"
    return lambda: (never, never)


class _Bound:
    """What both kinds of Scripts share: each operation's keys, the queue's hooks, and whether
    the server has functions (None until the first call finds out)."""

    def __init__(self, keys: Keys, trigger_keys: TriggerKeys | None, hooks: str) -> None:
        self._queue_keys = dict(zip(QUEUE_KEYS, keys.all(), strict=True))
        self._trigger_keys = trigger_keys or no_trigger_push(keys)
        self.hooks = hooks
        self._fixed = {n: self._fixed_keys(n) for n in NAMES}
        self._functions: bool | None = None

    def _fixed_keys(self, name: str) -> list[str] | None:
        """An operation's keys, when none of them is a trigger key (those may change)."""
        declared = operation(name).keys
        if operation(name).many or set(declared) & set(TRIGGER_KEYS):
            return None
        return [self._queue_keys[k] for k in declared]

    def keys(self, name: str) -> list[str]:
        """The KEYS of one operation, in the order its header declares them."""
        fixed = self._fixed[name]
        if fixed is not None:
            return fixed
        known = dict(zip(QUEUE_KEYS + TRIGGER_KEYS, self.all_keys(), strict=True))
        return [known[k] for k in operation(name).keys]

    def all_keys(self) -> list[str]:
        """Every key of the queue, its trigger keys last: its part of the KEYS of an operation
        over several queues (step.lua)."""
        return [*self._queue_keys.values(), *self._trigger_keys()]

    def _found(self, exc: ResponseError) -> bool:
        """After FUNCTION LOAD failed: True when the library is there after all (loaded by
        another client meanwhile); False when the server has no functions, or this user may
        not load them (an ACL without FUNCTION: the scripts need only EVALSHA); else re-raise."""
        text = str(exc)
        if _LIBRARY_EXISTS in text:
            return True
        if text.startswith(_NO_FUNCTIONS) or isinstance(exc, NoPermissionError):
            return False
        raise exc


class Scripts(_Bound):
    """The operations of one queue, bound to its client, its keys and its hooks."""

    def __init__(
        self,
        client: Redis,
        keys: Keys,
        trigger_keys: TriggerKeys | None = None,
        hooks: str = NO_HOOKS,
    ) -> None:
        super().__init__(keys, trigger_keys, hooks)
        self._client = client
        self._scripts: dict[str, Script] = {}

    def _script(self, name: str) -> Script:
        """One operation as a script, made at its first use: a server with functions never
        needs one, and hashing every operation's source cost each queue built some 10 ms."""
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._client.register_script(
                script_source(name, self.hooks)
            )
        return script

    def run(self, name: str, *args: str | int | float) -> Any:
        """Run one operation with its keys; Lua error replies become our exceptions."""
        return self.run_over(name, self.keys(name), *args)

    def run_over(self, name: str, keys: list[str], *args: str | int | float) -> Any:
        """Run one operation with the keys given (step.lua's: those of several queues)."""
        function = function_name(name, self.hooks)
        try:
            if self._functions is None:
                self._functions = self._load()
            if not self._functions:
                return self._script(name)(keys=keys, args=args)
            try:
                return self._client.fcall(function, len(keys), *keys, *args)
            except ResponseError as exc:
                if _FUNCTION_GONE not in str(exc):
                    raise
                self._load()
                return self._client.fcall(function, len(keys), *keys, *args)
        except ResponseError as exc:
            raise from_reply(exc) from None

    def run_replicated(
        self, name: str, keys: list[str], args: Sequence[str | int | float], replicas: Replicas
    ) -> tuple[Any, int]:
        """Run one operation, then on the same connection a write of one counter (so that what
        WAIT covers includes this call even when the operation itself wrote nothing: a repeat of
        one already done) and WAIT; returns its reply and how many replicas acknowledged it."""
        wanted, timeout_ms = replicas
        if self._functions is None:
            self._functions = self._load()
        for attempt in (1, 2):
            with self._client.pipeline(transaction=False) as pipe:
                if self._functions:
                    pipe.fcall(function_name(name, self.hooks), len(keys), *keys, *args)
                else:
                    self._script(name)(keys=keys, args=args, client=pipe)
                pipe.hincrby(self._queue_keys["stats"], "replicated_calls", 1)
                pipe.wait(wanted, timeout_ms)
                reply, _, acked = pipe.execute(raise_on_error=False)
            if isinstance(reply, ResponseError):
                if attempt == 1 and self._functions and _FUNCTION_GONE in str(reply):
                    self._load()
                    continue
                raise from_reply(reply)
            if isinstance(acked, Exception):
                raise acked
            return reply, int(acked)
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _load(self) -> bool:
        """Install the function library; False when the server has no functions."""
        try:
            self._client.function_load(library_source(self.hooks))
        except ResponseError as exc:
            return self._found(exc)
        return True


class AsyncScripts(_Bound):
    """The same operations on an asyncio client, for code that must not block its event loop
    (the web handlers: they enqueue, with the hooks' admit and enqueued, but never step)."""

    def __init__(
        self,
        client: AsyncRedis,
        keys: Keys,
        trigger_keys: TriggerKeys | None = None,
        hooks: str = NO_HOOKS,
    ) -> None:
        super().__init__(keys, trigger_keys, hooks)
        self._client = client
        self._scripts: dict[str, AsyncScript] = {}

    def _script(self, name: str) -> AsyncScript:
        """One operation as a script, made at its first use (see Scripts._script)."""
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._client.register_script(
                script_source(name, self.hooks)
            )
        return script

    async def run(
        self, name: str, *args: str | int | float, replicas: Replicas | None = None
    ) -> Any:
        """Run one operation with its keys; Lua error replies become our exceptions. With
        replicas = (n, timeout_ms), the call is followed on its own connection by WAIT, and
        NotReplicatedError says when fewer than n replicas acknowledged it in time."""
        keys = self.keys(name)
        function = function_name(name, self.hooks)
        try:
            if self._functions is None:
                self._functions = await self._load()
            if replicas is not None and replicas[0] > 0:
                return await self._replicated(name, function, keys, args, replicas)
            if not self._functions:
                return await self._script(name)(keys=keys, args=args)
            try:
                return await self._client.fcall(function, len(keys), *keys, *args)
            except ResponseError as exc:
                if _FUNCTION_GONE not in str(exc):
                    raise
                await self._load()
                return await self._client.fcall(function, len(keys), *keys, *args)
        except ResponseError as exc:
            raise from_reply(exc) from None

    async def _replicated(
        self,
        name: str,
        function: str,
        keys: list[str],
        args: tuple[str | int | float, ...],
        replicas: Replicas,
    ) -> Any:
        """The call and a WAIT in one pipeline, so that both go down one connection (WAIT
        counts the replicas that have every write of its own connection)."""
        wanted, timeout_ms = replicas
        for attempt in (1, 2):
            async with self._client.pipeline(transaction=False) as pipe:
                if self._functions:
                    pipe.fcall(function, len(keys), *keys, *args)
                else:
                    await self._script(name)(keys=keys, args=args, client=pipe)
                pipe.wait(wanted, timeout_ms)
                reply, acked = await pipe.execute(raise_on_error=False)
            if isinstance(reply, ResponseError):
                if attempt == 1 and self._functions and _FUNCTION_GONE in str(reply):
                    await self._load()
                    continue
                raise reply
            if isinstance(acked, Exception):
                raise acked
            if int(acked) < wanted:
                raise NotReplicatedError(int(acked), wanted)
            return reply
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _load(self) -> bool:
        """Install the function library; False when the server has no functions."""
        try:
            await self._client.function_load(library_source(self.hooks))
        except ResponseError as exc:
            return self._found(exc)
        return True
