"""The fair queue's Lua library is kept by concern (app/vtrr/lua/lib/, one file each) and put
together as one library in a stated order (lua_text.LIBRARY): each file says what it holds and
what it relies on, uses only what it or a file before it defines, and the whole loads on a real
server of each engine (a function library on Redis 7, a script per operation on Redis 6.2)."""

from __future__ import annotations

import re
from pathlib import Path

import redis

from app.vtrr.lua_text import LIB_DIR, LIBRARY, NAMES, library_name, library_source, script_source

MOST_LINES = 400
#: A top-level definition: `local function name(` or `local name, other =`.
DEFINITION = re.compile(r"^local (?:function (\w+)|([\w, ]+?)\s*(?:=|$|--))", re.MULTILINE)


def files() -> list[Path]:
    return [LIB_DIR / f"{name}.lua" for name in LIBRARY]


def code(text: str) -> str:
    """The text without its comments (none of the library's strings holds '--')."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def defined(text: str) -> list[str]:
    """The names a file defines at its top level, in order."""
    names: list[str] = []
    for function, variables in DEFINITION.findall(code(text)):
        names += [function] if function else [v.strip() for v in variables.split(",")]
    return names


def test_every_file_of_the_library_is_put_together_once() -> None:
    assert sorted(p.stem for p in LIB_DIR.glob("*.lua")) == sorted(LIBRARY)
    assert len(set(LIBRARY)) == len(LIBRARY)


def test_each_file_says_what_it_holds_and_what_it_relies_on() -> None:
    for path in files():
        lines = path.read_text().splitlines()
        header = [line for line in lines[: lines.index("")] if line.startswith("--")]
        assert header[0].startswith(f"-- lib/{path.name}: "), path.name
        assert any(line.startswith("-- Relies on: ") for line in header), path.name


def test_no_file_is_over_its_size() -> None:
    assert {p.name: n for p in files() if (n := len(p.read_text().splitlines())) > MOST_LINES} == {}


def test_each_helper_is_defined_once() -> None:
    """A second definition of a name would silently hide the first from every file after it."""
    names = [name for path in files() for name in defined(path.read_text())]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_a_file_uses_nothing_that_a_later_file_defines() -> None:
    """Lua sees a local only below its definition: a helper used above it would be read as a
    global, which Redis refuses when the call runs, not when the library loads."""
    paths = files()
    texts = [code(p.read_text()) for p in paths]
    early = []
    for i, path in enumerate(paths):
        for name in defined(path.read_text()):
            used = re.compile(rf"(?<![.\w]){name}\b")
            earlier = zip(paths[:i], texts[:i], strict=True)
            early += [f"{p.name} uses {name}" for p, text in earlier if used.search(text)]
    assert early == []


def test_the_library_loads_on_a_real_server(engine: tuple[str, redis.Redis]) -> None:
    kind, client = engine
    if kind == "functions":
        client.function_load(library_source(), replace=True)
        listed = {}
        for flat in client.function_list():
            entry = dict(zip(flat[::2], flat[1::2], strict=True))
            functions = [dict(zip(f[::2], f[1::2], strict=True)) for f in entry["functions"]]
            listed[entry["library_name"]] = {f["name"] for f in functions}
        assert listed[library_name()] == {f"{library_name()}_{name}" for name in NAMES}
    else:
        for name in NAMES:
            assert client.script_load(script_source(name))  # compiles
