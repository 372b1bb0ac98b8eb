"""What the tests of generated Lua constants share (app/vtrr/layout.py, app/store/scripts.py):
each constant's value as Lua holds it, read back from Redis, and a search of .lua files for a
raw copy of one."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Set
from pathlib import Path

import redis

from app.vtrr.layout import LuaValue

#: A Lua function that writes a value the way `shown` writes a Python one: exact, and the same
#: for a table whatever its order.
SHOW = r"""
local function show(v)
  if type(v) == 'string' then return 's:' .. v end
  if type(v) == 'number' then return 'n:' .. string.format('%.17g', v) end
  local parts = {}
  if #v > 0 then
    for i, item in ipairs(v) do parts[i] = show(item) end
    return '[' .. table.concat(parts, ',') .. ']'
  end
  for key, member in pairs(v) do
    if member ~= true then return 'not a set' end
    parts[#parts + 1] = show(key)
  end
  table.sort(parts)
  return '{' .. table.concat(parts, ',') .. '}'
end
"""


def shown(value: LuaValue) -> str:
    """A Python constant as SHOW writes what Lua made of it."""
    if isinstance(value, str):
        return f"s:{value}"
    if isinstance(value, int | float):
        return f"n:{float(value):.17g}"
    if isinstance(value, Set):
        return "{" + ",".join(sorted(shown(member) for member in value)) + "}"
    return "[" + ",".join(shown(item) for item in value) + "]"


def read_back(r: redis.Redis, chunk: str, names: Iterable[str]) -> dict[str, str]:
    """Each named local as Lua holds it after `chunk` (the generated constants and whatever is
    run after them), written by SHOW."""
    names = list(names)
    listed = ", ".join(f"show({name})" for name in names)
    reply = r.eval(f"{chunk}\n{SHOW}\nreturn {{{listed}}}", 0)
    return dict(zip(names, (x.decode() for x in reply), strict=True))  # type: ignore[union-attr]


def code_lines(path: Path) -> Iterable[tuple[int, str]]:
    """A .lua file's lines, numbered, without their comments (no script puts `--` in a string)."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        yield number, line.split("--", 1)[0]


def raw_copies(
    constants: Mapping[str, LuaValue], files: Iterable[Path], also_meant: Set[str] = frozenset()
) -> list[str]:
    """Where a .lua file spells a generated constant itself: defines a local of its name, or
    writes its value (a string, where it is a letter or longer than one character, quoted or
    as a field's prefix; a number of two digits or more; three neighbours of a list in a row).
    `also_meant` are values that also mean something else in the scripts (a word of a reply, a
    job's field): only their use as a field's prefix counts."""
    patterns = []
    for name, value in constants.items():
        patterns.append((name, re.compile(rf"\blocal\s+(\w+\s*,\s*)*{name}\b")))
        patterns += [(name, p) for p in _value_patterns(value, also_meant)]
    found = []
    for path in files:
        for number, code in code_lines(path):
            hits = {name for name, p in patterns if p.search(code)}
            found += [f"{path.name}:{number}: {name}" for name in sorted(hits)]
    return found


def _value_patterns(value: LuaValue, also_meant: Set[str]) -> list[re.Pattern[str]]:
    atoms = [value] if isinstance(value, str | int | float) else list(value)
    patterns = []
    for atom in atoms:
        if isinstance(atom, str) and (len(atom) >= 2 or atom.isalpha()):
            text, end = re.escape(atom), ":" if atom in also_meant else r"(\1|:)"
            patterns.append(re.compile(rf"""(['"]){text}{end}"""))
        elif not isinstance(atom, str) and abs(atom) >= 10 and isinstance(value, int):
            patterns.append(re.compile(rf"(?<![\w.]){atom}(?![\w.])"))
    if not isinstance(value, str | int | float | Set) and len(atoms) >= 3:
        for i in range(len(atoms) - 2):
            run = r"\s*,\s*".join(re.escape(_lua_atom(a)) for a in atoms[i : i + 3])
            patterns.append(re.compile(rf"(?<![\w.]){run}(?![\w.])"))
    return patterns


def _lua_atom(atom: str | float) -> str:
    return f"'{atom}'" if isinstance(atom, str) else repr(atom)
