"""The fair queue's Python and Lua spell each shared constant once (app/vtrr/layout.py): the
library's helpers hold exactly the Python's values, no .lua file keeps a copy of its own, and what
the scripts write (members, index entries, item fields, counters) is what the Python reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

from app.vtrr import FairQueue, Item, layout
from app.vtrr.layout import FAIR_MARK, FRONT_MARK, MEMBER_PREFIX, Field, Stat, index_entry
from app.vtrr.lua_text import LUA_DIR, lib
from app.vtrr.wire import task_id_of
from tests.lua_constants import raw_copies, read_back, shown

LUA_FILES = sorted(LUA_DIR.rglob("*.lua"))  # the operations and the library (lib/)
#: The marks are single digits, which the scripts also write as numbers ('1', '0'): a copy of
#: one is found where it is joined into a member or an entry, or compared with a member's first.
MARK_COPY = re.compile(r"""\.\.\s*'\d'|'\d'\s*\.\.|string\.sub\([^)]*\)\s*[=~]=\s*'\d'""")


def test_the_library_holds_the_python_values(r: redis.Redis) -> None:
    """Read after the whole library (lib/), so that a local of the same name there would show."""
    constants = layout.constants()
    held = read_back(r, lib(), constants)
    assert held == {name: shown(value) for name, value in constants.items()}


def test_no_lua_file_spells_a_constant_itself() -> None:
    assert raw_copies(layout.constants(), LUA_FILES) == []
    marks = [
        f"{path.name}:{n}"
        for path in LUA_FILES
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if MARK_COPY.search(line.split("--", 1)[0])
    ]
    assert marks == []


@pytest.mark.parametrize(
    "copy",
    [
        "local function task_id_of(member) return string.sub(member, 18) end",
        "return '1' .. string.format('%015d', n) .. ':' .. id",
        "redis.call('HGET', item_key(id), 'l')",
        "count('reclaimed', 1)",
        "local TASK_ID_AT = 17",
        "if op == 'sync' then",
        "x = 999999999999999 - n",
    ],
)
def test_a_raw_copy_is_found(tmp_path: Path, copy: str) -> None:
    """The search above finds each way a constant was spelled in Lua before layout.py."""
    planted = tmp_path / "planted.lua"
    planted.write_text(f"-- a comment may say 'l' or 18\n{copy}\n")
    found = raw_copies(layout.constants(), [planted])
    assert found or MARK_COPY.search(copy)
    assert all(f.startswith("planted.lua:2: ") for f in found)


def test_what_the_scripts_write_is_what_the_python_reads(r: redis.Redis) -> None:
    q = FairQueue(r, "layout", lease_seconds=30)
    q.enqueue("ann", [Item("a", id="fair-1", weight=3)])
    q.enqueue("bob", [Item("b", id="front-1")], front=True)
    item = {k.decode(): v.decode() for k, v in r.hgetall(q.keys.item_key("fair-1")).items()}
    assert set(item) <= set(Field)
    member = item[Field.MEMBER]
    assert member.startswith(FAIR_MARK) and task_id_of(member) == "fair-1"
    assert len(member) == MEMBER_PREFIX + len("fair-1")
    assert item[Field.ENTRY] == index_entry("ann", member)
    assert item[Field.PARTITION] == "ann" and item[Field.WEIGHT] == "3"
    front = r.hget(q.keys.item_key("front-1"), Field.MEMBER)
    assert front is not None and front.decode().startswith(FRONT_MARK)
    assert task_id_of(front) == "front-1"

    lease = q.dequeue()
    assert lease is not None and lease.task_id == "front-1"
    assert r.hget(q.keys.item_key("front-1"), Field.LEASE) == lease.token.encode()
    assert q.release(lease.task_id, lease.token)
    assert q.cancel("fair-1")
    counted = {k.decode() for k in r.hgetall(q.keys.stats)}
    assert counted == {Stat.ENQUEUED, Stat.RELEASED, Stat.CANCELLED}
    assert q.stats()[Stat.RELEASED] == 1 and q.stats()[Stat.CANCELLED] == 1
