"""The job store's and the webhook sender's Lua spell nothing the Python spells
(app/store/scripts.py constants): the scripts hold exactly the Python's values, no .lua file
keeps a copy of its own, and what the scripts count is what the collector reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from app.models import Status
from app.store import scripts
from app.store.hooks import hooks_lua
from app.store.keys import CHANNEL, METRICS, MOVES
from app.store.metrics import Counter, field
from app.store.scripts import LUA_DIR, constants, constants_lua
from app.webhooks.deliveries import LUA_DIR as WEBHOOKS_LUA_DIR
from tests.lua_constants import raw_copies, read_back, shown

LUA_FILES = sorted([*LUA_DIR.glob("*.lua"), *WEBHOOKS_LUA_DIR.glob("*.lua")])
#: Values of constants that are also other words of the scripts: start.lua's replies ('run',
#: 'ended'), a job's field ('attempts') and the statuses a script writes (TERMINAL's members).
ALSO_MEANT = frozenset(
    {"run", "ended", "attempts", "preemptions", *(s.value for s in Status if s.terminal)}
)


def test_the_scripts_hold_the_python_values(r: redis.Redis) -> None:
    """Read after the helpers and the run functions, so that a local of the same name there
    would show."""
    chunk = "\n".join(
        [constants_lua(), *((LUA_DIR / f"{n}.lua").read_text() for n in ("_lib", "runs"))]
    )
    held = read_back(r, f"local KEYS = {{}}\n{chunk}", constants())
    assert held == {name: shown(value) for name, value in constants().items()}


def test_every_script_gets_the_constants() -> None:
    for name in ("start", "finish", "revoke", "log", "progress", "requeue"):
        assert scripts.source(name).startswith(constants_lua())
    assert constants_lua() in hooks_lua()


def test_no_lua_file_spells_a_constant_itself() -> None:
    assert raw_copies(constants(), LUA_FILES, ALSO_MEANT) == []


@pytest.mark.parametrize(
    "copy",
    [
        "local BUCKETS = {0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200}",
        "bump(KEYS[3], 'finished:' .. kind .. ':REVOKED')",
        "redis.call('HINCRBY', KEYS[4], 'webhooks_failed', 1)",
        "local USAGE = 'fairgpu:usage:'",
        "redis.call('PUBLISH', channel .. ':moves', kind)",
        "local TERMINAL = {SUCCESS = true, FAILURE = true, REVOKED = true}",
    ],
)
def test_a_raw_copy_is_found(tmp_path: Path, copy: str) -> None:
    """The search above finds each way a constant was spelled in Lua before it was generated."""
    planted = tmp_path / "planted.lua"
    planted.write_text(f"-- a comment may say 'finished:' or 'fairgpu:usage:'\n{copy}\n")
    found = raw_copies(constants(), [planted], ALSO_MEANT)
    assert found and all(f.startswith("planted.lua:2: ") for f in found)


def test_what_a_script_counts_is_what_the_collector_reads(r: redis.Redis) -> None:
    """A queued job revoked: its end counted under the fields the collector reads, and the
    queue's move told on the channel it listens to."""
    job, events = "fairgpu:job:j1", "fairgpu:events:j1"
    r.hset(job, mapping={"task_id": "j1", "status": "PENDING", "kind": "short", "type": "burn"})
    with r.pubsub() as listener:
        listener.subscribe(MOVES)
        listener.get_message(timeout=5)  # the subscription's own confirmation
        revoke = r.register_script(scripts.source("revoke"))
        args = ["j1", CHANNEL, 60, "owner", "fairgpu:stops"]
        assert revoke(keys=[job, events, METRICS, "fairgpu:webhooks"], args=args) == b"revoked"
        moved = listener.get_message(timeout=5)
    assert moved is not None and moved["data"] == b"short"
    counted = {k.decode(): float(v) for k, v in r.hgetall(METRICS).items()}
    assert counted == {
        field(Counter.FINISHED, "short", Status.REVOKED): 1.0,
        field(Counter.ENDED, "burn", "cancelled"): 1.0,
    }
