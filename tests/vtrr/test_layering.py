"""The library's layering, read from its source: no module reaches into another object's
private members, and no import among its modules points back (TYPE_CHECKING imports and
imports inside functions count: a name imported for types only is still a dependency that
must point one way)."""

from __future__ import annotations

import ast
from pathlib import Path

import app.vtrr

PACKAGE = Path(app.vtrr.__file__).parent
#: (module, expression) pairs allowed to reach a private member, with why.
ALLOWED = {
    # Kombu's in-memory channel has no public read of one message: trigger_message reads the
    # message Kombu built, to copy it byte for byte (see trigger_push.py).
    ("trigger_push", "channel._get"),
}


def modules() -> dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text()) for path in sorted(PACKAGE.glob("*.py"))}


def private_reaches(tree: ast.Module) -> set[str]:
    """Each `x._name` in the tree whose x is not self or cls (dunders aside)."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.add(ast.unparse(node))
    for node in ast.walk(tree):  # a module's private names, imported by another
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("app.vtrr"):
            found |= {f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")}
    return found


def imports(tree: ast.Module) -> set[str]:
    """The library's modules this one imports, wherever the import stands."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:2] != ["app", "vtrr"]:
                continue
            if len(parts) > 2:
                found.add(parts[2])
            else:  # from app.vtrr import module
                found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["app", "vtrr"] and len(parts) > 2:
                    found.add(parts[2])
    return found


def test_no_module_reaches_into_another_object_s_private_members() -> None:
    reaches = {(name, reach) for name, tree in modules().items() for reach in private_reaches(tree)}
    assert reaches - ALLOWED == set()


def cycle_from(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path of imports from start back to start, or None."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_no_import_among_the_library_s_modules_points_back() -> None:
    # __init__ only re-exports: it imports every module and none imports it (checked below).
    graph = {name: imports(tree) - {name} for name, tree in modules().items()}
    assert not any("__init__" in deps for deps in graph.values())
    graph.pop("__init__")
    cycles = [c for name in graph if (c := cycle_from(graph, name)) is not None]
    assert cycles == []


def test_the_checks_see_what_they_look_for() -> None:
    reached = ast.parse(
        "from app.vtrr.drain import _end, run_trigger\n"
        "def f(q, self):\n    q._order()\n    self._x\n    q.__class__\n"
    )
    assert private_reaches(reached) == {"q._order", "app.vtrr.drain._end"}
    two = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycle_from(two, "a") == ["a", "b", "c", "a"] and cycle_from(two, "d") is None
    typed = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.vtrr.queue import X\n"
    )
    assert imports(typed) == {"queue"}
