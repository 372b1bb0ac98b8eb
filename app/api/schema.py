"""The OpenAPI schema, in two views: the public one at /openapi.json leaves the admin paths out
(to anyone but an admin they answer 404 as if they did not exist, and the schema should not say
otherwise); the whole one is served to admins only, at /admin/openapi.json."""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

ADMIN_PREFIX = "/admin/"


def whole(app: FastAPI) -> dict[str, Any]:
    """Every operation, less the 422 FastAPI adds for a task id in the path: a malformed id is
    the same 404 as an unknown one, so those operations never answer 422 (unless they document
    one of their own, for another parameter). Built once."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, summary=app.summary, routes=app.routes
        )
        for path, operations in schema["paths"].items():
            if "{task_id}" in path or "{code_id}" in path:  # a code id's 404 is as a task id's
                for operation in operations.values():
                    if _automatic(operation["responses"].get("422")):
                        operation["responses"].pop("422")
        app.openapi_schema = schema
    return app.openapi_schema


def public(app: FastAPI) -> dict[str, Any]:
    """The schema without the admin paths, and without the shapes only they use."""
    cached: dict[str, Any] | None = getattr(app.state, "public_openapi", None)
    if cached is None:
        schema = copy.deepcopy(whole(app))
        schema["paths"] = {
            path: ops for path, ops in schema["paths"].items() if not path.startswith(ADMIN_PREFIX)
        }
        used = _references(schema["paths"])
        components = schema.get("components", {}).get("schemas", {})
        while True:  # shapes that the kept shapes refer to are kept too
            more = _references([components[name] for name in used if name in components])
            if more <= used:
                break
            used |= more
        schema["components"]["schemas"] = {k: v for k, v in components.items() if k in used}
        app.state.public_openapi = cached = schema
    return cached


def _automatic(response: dict[str, Any] | None) -> bool:
    """Whether a 422 is the one FastAPI adds by itself (HTTPValidationError)."""
    if response is None:
        return False
    return _references(response) == {"HTTPValidationError"}


def _references(node: Any) -> set[str]:
    """The names of the component schemas that node refers to, at any depth."""
    found: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                found.add(ref.rsplit("/", 1)[1])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found
