"""Request limits: BodyLimit (413 for bodies over a size, before they are read), RateLimiter
(429 for a key that sends too many requests a second) and ErrorRate (which counts the requests
that end in an error against their key's rate too)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.clock import RedisClock
from app.auth import digest
from app.store.keys import RATE_TTL_S, rate_key

#: How long a caller over its rate is told to wait (Retry-After).
RETRY_AFTER_S = 1
#: Where a request's scope says that it was counted against its key's rate (mark_counted).
COUNTED = "fairgpu.rate_counted"


def over_rate(per_second: int) -> str:
    """The detail of the one 429 of a key over its rate, whoever counted it."""
    return f"more than {per_second} requests a second with this key"


def mark_counted(scope: Scope) -> None:
    """Note that this request was counted against its key's rate, so that ErrorRate does not
    count it again when its answer is an error."""
    scope[COUNTED] = True


class BodyLimit:
    """ASGI middleware: 413 for a Content-Length over the limit, or a body that streams past it.

    A streamed body that goes past the limit is answered at once; the app then sees the client
    disconnect, and whatever it still tries to send is dropped.
    """

    def __init__(
        self, app: ASGIApp, max_bytes: int, wider: Mapping[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.wider = dict(wider or {})  # paths that take larger bodies (POST /code): how large
        # Each refusal is the same every time: written once, here.
        self._refusals = {
            limit: json.dumps({"detail": f"request body over {limit} bytes"}).encode()
            for limit in (max_bytes, *self.wider.values())
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        most = self.wider.get(scope["path"], self.max_bytes) if self.wider else self.max_bytes
        length = _content_length(scope["headers"])
        if length is not None and (not length.isdigit() or int(length) > most):
            await self._refuse(send, most)
            return
        seen = 0
        refused = False

        async def limited() -> Message:
            nonlocal seen, refused
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > most and not refused:
                refused = True
                await self._refuse(send, most)
            return {"type": "http.disconnect"} if refused else message

        async def guarded(message: Message) -> None:
            if not refused:
                await send(message)

        await self.app(scope, limited, guarded)

    async def _refuse(self, send: Send, most: int) -> None:
        body = self._refusals[most]
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _content_length(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The last Content-Length header's value (as a dict of the headers would hold it), or None;
    without building that dict on every request."""
    found = None
    for name, value in headers:
        if name == b"content-length":
            found = value
    return found


#: The counter of one key's requests in the current second, and how many it may have.
RateCount = tuple[str, int]


class RateLimiter:
    """Requests per second per API key, counted in Redis so that every API process shares them.

    A fixed one-second window: `fairgpu:rate:<key digest>:<second>`, incremented and given a
    two-second expiry in one round trip.
    """

    def __init__(self, client: AsyncRedis, per_second: int, clock: RedisClock) -> None:
        self.client = client
        self.per_second = per_second
        self.clock = clock  # the second is Redis's, the same in every API process

    def counter(self, key_digest: str) -> RateCount | None:
        """The counter a request with this key counts against now, with the limit; None when
        there is no limit. For a script that counts the request in its own call (a submit's,
        in the job store's hooks: app/store/lua/submit.lua), as spend() would: incremented,
        given a two-second expiry, refused above the limit."""
        if self.per_second <= 0:
            return None
        return rate_key(key_digest, int(self.clock.now())), self.per_second

    async def spend(self, key_digest: str) -> int | None:
        """Count one request; None when it is allowed, else the seconds to wait."""
        counter = self.counter(key_digest)
        if counter is None:
            return None
        key, limit = counter
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            pipe.expire(key, RATE_TTL_S)
            count, _ = await pipe.execute()
        return None if int(count) <= limit else RETRY_AFTER_S


class ErrorRate:
    """ASGI middleware: a request with a valid key that ends in an error before it was counted
    (a 4xx: a body over the limit, a malformed task id, an invalid body, an admin path to a
    non-admin key; or a crash, which the server answers 500 and logs) counts against its key's
    rate all the same, so that errors cost a client what served requests do; a 4xx past the rate
    is the 429 instead.

    A request without a valid key (the 401) counts nothing: there is no key to count it against,
    and it sends Redis no command (docs/security.md, "Request limits").
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replaced = False

        async def counted(message: Message) -> None:
            nonlocal replaced
            if replaced:
                return  # the rest of the answer the 429 replaced
            status: int = message.get("status", 0)
            if message["type"] == "http.response.start" and 400 <= status < 500:
                per_second = await _over_rate(scope, status)
                if per_second is not None:
                    replaced = True
                    await _too_many(send, per_second)
                    return
            await send(message)

        try:
            await self.app(scope, receive, counted)
        except Exception:
            await _over_rate(scope, 500)  # counted, then answered (and logged) as a crash
            raise


async def _over_rate(scope: Scope, status: int) -> int | None:
    """Count a request that ended in an error against its key, if it has a valid one and was not
    counted yet; the key's limit when that puts it over, else None."""
    if status in (401, 429) or scope.get(COUNTED):
        return None  # 401: no valid key; 429: counted by whoever refused it
    key = _header(scope, b"x-api-key")
    runtime: Any = getattr(scope["app"].state, "runtime", None)
    if key is None or runtime is None or runtime.accounts.authenticate(key) is None:
        return None
    mark_counted(scope)
    limiter: RateLimiter = runtime.limiter
    try:
        waited = await limiter.spend(digest(key))
    except (RedisError, OSError):  # Redis away: the error goes out uncounted
        return None
    return None if waited is None else limiter.per_second


def _header(scope: Scope, name: bytes) -> str | None:
    """The first value of a header, as Starlette reads it (latin-1), or None."""
    for key, value in scope["headers"]:
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


async def _too_many(send: Send, per_second: int) -> None:
    """The 429 of a key over its rate, as the app's own handler writes it."""
    body = json.dumps({"detail": over_rate(per_second)}, separators=(",", ":")).encode()
    headers = [
        (b"content-length", str(len(body)).encode()),
        (b"content-type", b"application/json"),
        (b"retry-after", str(RETRY_AFTER_S).encode()),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})
