"""KeyedRoute: the route class of every endpoint that needs an API key.

It answers 401 for a missing or unknown key before anything else is looked at (the task id,
the body), and hands the endpoint a request whose JSON is read strictly: UTF-8 only (a BOM or
UTF-16 is refused), no duplicate keys (the last one would silently win), and a body that the
parser cannot take at all (nested too deep, a number too long) is the 422 of any malformed
JSON rather than a 400.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response, status
from fastapi.routing import APIRoute

UNAUTHORIZED = "missing or invalid API key (header X-API-Key)"


def unauthorized() -> HTTPException:
    """The one 401 that every keyed endpoint answers."""
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=UNAUTHORIZED, headers={"WWW-Authenticate": "ApiKey"}
    )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key appears twice in one object")
    return dict(pairs)


class StrictJSONRequest(Request):
    """A request whose json() refuses what json.loads would let through or choke on."""

    async def json(self) -> Any:
        """The body as strict JSON; json.JSONDecodeError (FastAPI's 422) for anything else."""
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = json.loads(body.decode("utf-8"), object_pairs_hook=_no_duplicates)
            except json.JSONDecodeError:
                raise
            except (ValueError, RecursionError) as exc:  # bad UTF-8, BOM, too deep, too long
                raise json.JSONDecodeError(str(exc) or type(exc).__name__, "", 0) from None
        return self._json


class KeyedRoute(APIRoute):
    """An endpoint that needs an API key: 401 first, then strict JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """Wrap FastAPI's handler with the key check and the strict request."""
        handle = super().get_route_handler()

        async def keyed(request: Request) -> Response:
            accounts = request.app.state.runtime.accounts
            if accounts.authenticate(request.headers.get("x-api-key")) is None:
                raise unauthorized()
            return await handle(StrictJSONRequest(request.scope, request.receive))

        return keyed
