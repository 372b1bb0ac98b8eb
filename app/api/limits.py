"""Request limits: BodyLimit (413 for bodies over a size, before they are read) and RateLimiter
(429 for a key that sends too many requests a second)."""

from __future__ import annotations

import json

from redis.asyncio import Redis as AsyncRedis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.clock import RedisClock
from app.store.keys import RATE_TTL_S, rate_key

#: How long a caller over its rate is told to wait (Retry-After).
RETRY_AFTER_S = 1


class BodyLimit:
    """ASGI middleware: 413 for a Content-Length over the limit, or a body that streams past it.

    A streamed body that goes past the limit is answered at once; the app then sees the client
    disconnect, and whatever it still tries to send is dropped.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        # The refusal is the same every time: written once, here.
        self._refusal = json.dumps({"detail": f"request body over {max_bytes} bytes"}).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _content_length(scope["headers"])
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await self._refuse(send)
            return
        seen = 0
        refused = False

        async def limited() -> Message:
            nonlocal seen, refused
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes and not refused:
                refused = True
                await self._refuse(send)
            return {"type": "http.disconnect"} if refused else message

        async def guarded(message: Message) -> None:
            if not refused:
                await send(message)

        await self.app(scope, limited, guarded)

    async def _refuse(self, send: Send) -> None:
        body = self._refusal
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
