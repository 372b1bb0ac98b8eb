"""The text of the queue's Lua: one file per atomic operation in lua/, sharing the helpers of
lua/lib/ (one file per concern, put together in LIBRARY's order), as a function library
(Redis 7) or as one script per operation (Redis 6.2); scripts.py runs them.

Each operation's header names the keys it touches (`-- KEYS: queue meta ...`, the names of
lib/keys.lua's `K`); a call passes those keys only, in that order. The library's name carries
a digest of its text, so processes of two versions can share a server, each calling its own.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from app.vtrr import layout

LUA_DIR = Path(__file__).with_name("lua")
LIB_DIR = LUA_DIR / "lib"
#: The helpers' files (lua/lib/), in the order they are put together: each may use what the
#: files before it define (Lua's locals are seen only below their definition), and each says in
#: its header what it holds and what it relies on.
LIBRARY = (
    "keys",
    "clock",
    "pools",
    "partitions",
    "limits",
    "parking",
    "usage",
    "cards",
    "placing",
    "triggers",
    "leases",
    "put_back",
    "reclaim",
    "reserve",
    "next_item",
    "gangs",
)
NAMES = (
    "enqueue",
    "dequeue",
    "dequeue_unlimited",
    "dequeue_card",
    "ack",
    "ack_limited",
    "ack_lease",
    "renew",
    "release",
    "put_back",
    "take",
    "reclaim",
    "cancel",
    "promote",
    "position",
    "positions",
    "triggers",
    "drop",
    "credit",
    "began",
    "step",
    "reshare",
    "limit",
    "wake",
    "tick",
    "lend",
)
#: lib/keys.lua's names for the queue's keys (Keys' fields, in order), then the two trigger keys.
QUEUE_KEYS = (
    "queue",
    "item",
    "inflight",
    "cvt",
    "pvt",
    "pqueued",
    "idle",
    "seq",
    "triggers",
    "stats",
    "wake",
    "queued_weight",
    "items",
    "limits",
    "parked",
    "reps",
    "waits",
    "park",
    "live",
    "freed",
    "usage",
    "usage_at",
    "pool",
    "pools",
    "kinds",
    "kind",
    "kpools",
    "kclock",
    "card",
    "resv",
    "fleet",
)
TRIGGER_KEYS = ("trigger_message", "broker")
#: What an operation over several queues declares (step.lua): each queue's keys in turn, in the
#: order of QUEUE_KEYS then TRIGGER_KEYS.
MANY_QUEUES = "*queues"
#: The hooks of a queue without any (see app/vtrr/hooks.py): a Lua chunk that returns no hook.
NO_HOOKS = "return {}"
#: The operations that call hooks, and so carry the hooks' chunk in their script (Redis 6.2):
#: those that reclaim call `reclaimed`.
HOOKED = frozenset({"enqueue", "step", "dequeue", "ack_lease", "reclaim"})
_DECLARED = re.compile(r"^-- KEYS: (.*)$", re.MULTILINE)


@cache
def source(name: str, directory: Path) -> str:
    """The text of one script of another package (app/store, app/webhooks): its directory's
    _lib.lua, then the script. (The fair queue's own operations are built by `operation`.)"""
    return (directory / "_lib.lua").read_text() + "\n" + (directory / f"{name}.lua").read_text()


@dataclass(frozen=True)
class Operation:
    """One operation: its name, the keys it declares (in KEYS order), and its Lua body."""

    name: str
    keys: tuple[str, ...]
    body: str

    @property
    def many(self) -> bool:
        """Whether it runs over several queues, each giving all its keys (step.lua)."""
        return self.keys == (MANY_QUEUES,)

    def bound_body(self) -> str:
        """The body behind the line that gives its KEYS their names in lib/keys.lua's `K` (a
        table constructor, sized at once: cheaper than filling a table in a loop); an operation
        over several queues gets the names of each queue's keys instead, and binds them itself."""
        if self.many:
            names = ", ".join(f"'{k}'" for k in (*QUEUE_KEYS, *TRIGGER_KEYS))
            return f"local QUEUE_KEY_NAMES = {{{names}}}\n{self.body}"
        names = ", ".join(f"{k} = KEYS[{i}]" for i, k in enumerate(self.keys, 1))
        return f"bind({{{names}}})\n{self.body}"


@cache
def operation(name: str) -> Operation:
    """An operation of lua/, its keys read from its `-- KEYS:` header line(s)."""
    body = (LUA_DIR / f"{name}.lua").read_text()
    declared = tuple(k for line in _DECLARED.findall(body) for k in line.split())
    unknown = set(declared) - set(QUEUE_KEYS) - set(TRIGGER_KEYS)
    if declared == (MANY_QUEUES,):
        unknown = set()
    if not declared or unknown:
        raise ValueError(f"{name}.lua: declare its keys with '-- KEYS: ...' ({sorted(unknown)})")
    return Operation(name, declared, body)


@cache
def lib() -> str:
    """The helpers every operation shares: the constants the Python spells too (layout.py), as
    locals, then the files of lua/lib/ in LIBRARY's order."""
    parts = [layout.lua(), *((LIB_DIR / f"{name}.lua").read_text() for name in LIBRARY)]
    return "\n".join(parts)


def hooks_source(hooks: str) -> str:
    """The `HOOKS` table of the operations that call hooks (HOOKED): what the hooks' chunk
    returns, run in a scope of its own so that its locals stay its own."""
    return f"local HOOKS = (function()\n{hooks}\nend)()\nuse_hooks(HOOKS)"


@cache
def script_source(name: str, hooks: str = NO_HOOKS) -> str:
    """The EVALSHA script of an operation (Redis 6.2): the helpers, then the bound body; the
    hooks' chunk too for an operation that calls them (HOOKED)."""
    if name in HOOKED:
        return f"{lib()}\n{hooks_source(hooks)}\n{operation(name).bound_body()}"
    return f"{lib()}\n{operation(name).bound_body()}"


@cache
def library_name(hooks: str = NO_HOOKS) -> str:
    """The function library's name: `vtrr_` and a digest of its helpers, its operations (as
    scripts and as functions) and its hooks (queues with other hooks call a library of their
    own)."""
    text = lib() + "".join(script_source(n, hooks) + registered(n, "") for n in NAMES)
    return f"vtrr_{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def function_name(name: str, hooks: str = NO_HOOKS) -> str:
    """The name an operation is called by with FCALL (Redis 7)."""
    return f"{library_name(hooks)}_{name}"


def wire_name(name: str, functions: bool, hooks: str = NO_HOOKS) -> str:
    """What names an operation in the command that runs it: its function (FCALL, Redis 7), or
    its script's SHA1 (EVALSHA, Redis 6.2). For tests that watch the wire."""
    if functions:
        return function_name(name, hooks)
    return hashlib.sha1(script_source(name, hooks).encode(), usedforsecurity=False).hexdigest()


@cache
def library_source(hooks: str = NO_HOOKS) -> str:
    """The function library (Redis 7): the helpers and the hooks once, then one function per
    operation."""
    parts = [f"#!lua name={library_name(hooks)}", lib(), hooks_source(hooks)]
    parts += [registered(name, function_name(name, hooks)) for name in NAMES]
    return "\n".join(parts)


def registered(name: str, function: str) -> str:
    """One operation as the library's function of that name. Its keys' table is made once, when
    the library loads, and each call fills it from KEYS; the first call binds it (setmetatable,
    which a library may not call while it loads), the others rebind it: cheaper than a new
    table and a setmetatable a call. An operation over several queues binds each queue's keys
    itself."""
    op = operation(name)
    head = f"redis.register_function('{function}', function(KEYS, ARGV)"
    if op.many:
        return f"{head}\n{op.bound_body()}\nend)"
    fields = ", ".join(f"{k} = false" for k in op.keys)
    fill = "\n".join(f"k.{k} = KEYS[{i}]" for i, k in enumerate(op.keys, 1))
    bind = "if bound then rebind(k) else bind(k) bound = true end"
    return f"do\nlocal k, bound = {{{fields}}}, false\n{head}\n{fill}\n{bind}\n{op.body}\nend)\nend"
