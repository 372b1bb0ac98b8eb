"""Request limits: BodyLimit (413 for bodies over a size, before they are read) and RateLimiter
(429 for a key that sends too many requests a second)."""

from __future__ import annotations

import json
import time

from redis.asyncio import Redis as AsyncRedis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.store.keys import rate_key


class BodyLimit:
    """ASGI middleware: 413 for a Content-Length over the limit, or a body that streams past it.

    A streamed body that goes past the limit is answered at once; the app then sees the client
    disconnect, and whatever it still tries to send is dropped.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
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
        body = json.dumps({"detail": f"request body over {self.max_bytes} bytes"}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class RateLimiter:
    """Requests per second per API key, counted in Redis so that every API process shares them.

    A fixed one-second window: `fairgpu:rate:<key digest>:<second>`, incremented and given a
    two-second expiry in one round trip.
    """

    def __init__(self, client: AsyncRedis, per_second: int) -> None:
        self.client = client
        self.per_second = per_second

    async def spend(self, key_digest: str) -> int | None:
        """Count one request; None when it is allowed, else the seconds to wait."""
        if self.per_second <= 0:
            return None
        window = int(time.time())
        key = rate_key(key_digest, window)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            pipe.expire(key, 2)
            count, _ = await pipe.execute()
        return None if int(count) <= self.per_second else 1
