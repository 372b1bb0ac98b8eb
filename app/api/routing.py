"""KeyedRoute and AdminRoute: the route classes of every endpoint that needs an API key.

KeyedRoute answers 401 for a missing or unknown key before anything else is looked at (the task id,
the body), and hands the endpoint a request whose JSON is read strictly: UTF-8 only (a BOM or
UTF-16 is refused), no duplicate keys (the last one would silently win), and a body that the
parser cannot take at all (nested too deep, a number too long) is the 422 of any malformed
JSON rather than a 400.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.types import Scope

from app.api.limits import RETRY_AFTER_S, RateLimiter, mark_counted, over_rate
from app.auth import Account, digest

UNAUTHORIZED = "missing or invalid API key (header X-API-Key)"
HIDDEN = "Not Found"  # what Starlette answers for a path it does not know
#: The mark of an endpoint that counts the request against its key's rate itself.
_COUNTS_OWN_RATE = "__fairgpu_counts_own_rate__"
Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


def unauthorized() -> HTTPException:
    """The one 401 that every keyed endpoint answers."""
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=UNAUTHORIZED, headers={"WWW-Authenticate": "ApiKey"}
    )


def too_many_requests(per_second: int) -> HTTPException:
    """The one 429 of a key over its rate, whoever counted it."""
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS,
        detail=over_rate(per_second),
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def counts_own_rate(endpoint: Endpoint) -> Endpoint:
    """Declare that a keyed endpoint counts each request against its key's rate itself, in the
    same Redis call as its own work (see RateLimiter.counter), and answers too_many_requests()
    when it is over; KeyedRoute then does not count it a second time. The route-walk test
    (tests/api/test_routing.py) lists the endpoints that may say so."""
    setattr(endpoint, _COUNTS_OWN_RATE, True)
    return endpoint


def counts_itself(endpoint: Callable[..., Any]) -> bool:
    """Whether the endpoint was declared with counts_own_rate."""
    return getattr(endpoint, _COUNTS_OWN_RATE, False) is True


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key appears twice in one object")
    return dict(pairs)


def declares_json(content_type: str) -> bool:
    """Whether a Content-Type names JSON: application/json or application/<anything>+json."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def require_json(request: Request) -> None:
    """A body that is not declared JSON is a 422 that says so, rather than FastAPI's "Input
    should be a valid dictionary" about a body it never parsed."""
    given = request.headers.get("content-type", "")
    if declares_json(given):
        return
    said = f"got {given!r}" if given else "none was given"
    raise RequestValidationError(
        [
            {
                "type": "content_type",
                "loc": ("header", "content-type"),
                "msg": f"the body must be JSON with Content-Type: application/json ({said})",
            }
        ]
    )


def _has_body(request: Request) -> bool:
    """Whether the request says it carries a body (an optional body may be left out)."""
    headers = request.headers
    return headers.get("content-length", "0") != "0" or "transfer-encoding" in headers


class StrictJSONRequest(Request):
    """A request whose json() refuses what json.loads would let through or choke on."""

    async def json(self) -> Any:
        """The body as strict JSON; json.JSONDecodeError (FastAPI's 422) for anything else."""
        if not hasattr(self, "_json"):
            self._json = strict_json(await self.body())
        return self._json


def strict_json(body: bytes) -> Any:
    """The body parsed as strict JSON (UTF-8 only, no duplicate keys); json.JSONDecodeError for
    anything else, the error FastAPI answers with its 422 for malformed JSON."""
    try:
        return json.loads(body.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:  # bad UTF-8, BOM, too deep, too long
        raise json.JSONDecodeError(str(exc) or type(exc).__name__, "", 0) from None


@dataclass(frozen=True)
class Caller:
    """Who is calling: the account, and which of its keys (by digest) was used."""

    account: Account
    key_digest: str


def authenticated(request: Request) -> Caller | None:
    """The caller whose key came in X-API-Key, or None for a missing or unknown key."""
    key = request.headers.get("x-api-key")
    account = request.app.state.runtime.accounts.authenticate(key)
    return None if account is None else Caller(account, digest(key or ""))


class KeyedRoute(APIRoute):
    """An endpoint that needs an API key: 401 first, then strict JSON, then one count against
    the key's rate once the request has passed validation (a request refused before that is
    counted by ErrorRate, app/api/limits.py, as its answer goes out).

    The key is checked once, here; the endpoint's Caller comes from `request.state.caller`.
    Counting wraps the endpoint itself, which FastAPI calls only for a valid request, so no
    route of this class can forget it; the only exception is an endpoint declared with
    counts_own_rate, which counts in its own Redis call instead.
    """

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        _require_async(endpoint)
        counted = _entered(endpoint) if counts_itself(endpoint) else _counted(endpoint)
        super().__init__(path, counted, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """Wrap FastAPI's handler with the key check and the strict request."""
        handle = super().get_route_handler()
        # Decided once: a required body must be declared JSON; an optional one, when sent.
        body = self.body_field
        required = body is not None and body.field_info.is_required()
        optional = body is not None and not required

        async def keyed(request: Request) -> Response:
            caller = authenticated(request)
            if caller is None or not self.admits(caller):
                raise self.refusal()
            if required or (optional and _has_body(request)):
                require_json(request)
            request.state.caller = caller
            _visit.set((caller, request.app.state.runtime.limiter, request.scope))
            return await handle(StrictJSONRequest(request.scope, request.receive))

        return keyed

    def admits(self, caller: Caller) -> bool:
        """Whether this caller may use the endpoint at all."""
        return True

    def refusal(self) -> HTTPException:
        """The answer to a caller who may not."""
        return unauthorized()


class AdminRoute(KeyedRoute):
    """An endpoint for admins only: anyone else gets the 404 of a path that does not exist."""

    def admits(self, caller: Caller) -> bool:
        """Admins only."""
        return caller.account.admin

    def refusal(self) -> HTTPException:
        """Starlette's own 404, so the path's existence is not given away."""
        return HTTPException(status.HTTP_404_NOT_FOUND, detail=HIDDEN)


#: The caller, rate limiter and scope of the request in progress, for the endpoint's wrapper.
_visit: ContextVar[tuple[Caller, RateLimiter, Scope]] = ContextVar("fairgpu_visit")


def _require_async(endpoint: Callable[..., Any]) -> None:
    """FastAPI would run a plain def in its thread pool; awaited by the counting wrapper, it
    would block the event loop instead: refused when the route is made."""
    if not inspect.iscoroutinefunction(endpoint):
        raise TypeError(f"{endpoint.__name__}: a keyed endpoint must be an async def")


def _counted(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """The endpoint, counting one request against the caller's key before it runs."""

    @functools.wraps(endpoint)  # FastAPI reads the parameters through __wrapped__
    async def counted(*args: Any, **kwargs: Any) -> Any:
        caller, limiter, scope = _visit.get()
        mark_counted(scope)
        if await limiter.spend(caller.key_digest) is not None:
            raise too_many_requests(limiter.per_second)
        return await endpoint(*args, **kwargs)

    return counted


def _entered(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """An endpoint that counts its request itself (counts_own_rate), noting that it was reached:
    whatever it answers was counted there."""

    @functools.wraps(endpoint)
    async def entered(*args: Any, **kwargs: Any) -> Any:
        mark_counted(_visit.get()[2])
        return await endpoint(*args, **kwargs)

    return entered
