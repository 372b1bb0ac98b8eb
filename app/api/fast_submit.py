"""SubmitFastPath: POST /enqueue-task without FastAPI's per-request machinery, for a request that
is valid in every respect; any other request goes on to the FastAPI route, which answers it.

A submit is the API's hot path, and most of its cost was FastAPI's, not the job's: the layers
around the router, the route match, solving the dependencies (the key, the body, the job, the
Idempotency-Key header) and wrapping the endpoint (docs/benchmarks.md, "A fast path and
hiredis's packer"). This ASGI middleware, the outermost of the app's own, takes the request
before all that and does only what the route would: it checks the key, the Content-Type, the
Idempotency-Key and the body by the route's own rules (the same functions and the same pydantic
model), then submits as the route does (routes/jobs.py submit) and answers its 200 byte for
byte.

One answer, one place: the fast path never writes a refusal of the request itself. Whatever it
does not accept (an unknown key, a header given twice, a body over the limit or sent in chunks,
JSON it cannot read, a body or job the model refuses) goes on, body and all, to the FastAPI
route, which answers it as it answers every request. Only what happens once the request was
accepted (the submit's own 402, 422, 429 and 503, Redis away) is answered here, by the
app's own exception handlers. tests/api/test_fast_submit.py sends the same requests with the
fast path and without it and compares the answers.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from fastapi import FastAPI, Request, Response
from pydantic import TypeAdapter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.routes.jobs import IDEMPOTENCY_KEY_MAX, IDEMPOTENCY_KEY_PATTERN, accepted, submit
from app.api.routing import Caller, declares_json, strict_json
from app.api.runtime import Runtime
from app.api.submissions import checked_submission
from app.auth import digest
from app.models import EnqueueBody

PATH = "/enqueue-task"
#: The headers the route reads; a request that repeats one goes to the route, whose reading of
#: a repeated header is the one that counts.
_READ = (b"x-api-key", b"content-type", b"content-length", b"idempotency-key")
_CHUNKED = b"transfer-encoding"
#: The Idempotency-Key header's rules, the route's own (a header value holds no newline, which
#: the pattern's $ would let through).
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN.encode())
_BODY = TypeAdapter[Any](EnqueueBody)


class SubmitFastPath:
    """ASGI middleware: POST /enqueue-task, when everything about it is valid, submitted here;
    every other request, and every request it does not accept, passed on to `app`."""

    def __init__(self, app: ASGIApp, api: FastAPI, max_bytes: int) -> None:
        self.app, self.api, self.max_bytes = app, api, max_bytes
        self.answered = 0  # requests it answered itself (the tests' proof that it is taken)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = _read_headers(scope["headers"])
        length = b"" if headers is None else headers.get(b"content-length", b"")
        if headers is None or not length.isdigit() or int(length) > self.max_bytes:
            # A repeated header, a body in chunks or over the limit (BodyLimit's 413): the route's.
            await self.app(scope, receive, send)
            return
        body = await _whole_body(receive)
        if body is None:
            return  # the client left before its body was in: there is no one to answer
        if not await self._submit(scope, headers, body, receive, send):
            await self.app(scope, _replay(body, receive), send)

    async def _submit(
        self, scope: Scope, headers: dict[bytes, bytes], body: bytes, receive: Receive, send: Send
    ) -> bool:
        """Submit the job and answer, and True; False, having written and answered nothing,
        for a request the route should judge."""
        runtime: Runtime = self.api.state.runtime
        raw_key = headers.get(b"x-api-key")
        key = None if raw_key is None else raw_key.decode("latin-1")  # as Starlette reads it
        account = runtime.accounts.authenticate(key)
        fits, idempotency_key = _idempotency_key(headers.get(b"idempotency-key"))
        if (
            account is None
            or not fits
            or not declares_json(headers.get(b"content-type", b"").decode("latin-1"))
        ):
            return False
        try:
            job = await checked_submission(
                _BODY.validate_python(strict_json(body)), runtime.job_types, runtime.settings
            )
        except Exception:  # a refused body or job, or anything else: the route will say what
            return False  # (these checks write nothing, so it may make them again)
        try:
            job_id = await submit(runtime, Caller(account, digest(key or "")), job, idempotency_key)
        except Exception as exc:  # once submit() has run, never again: it may have written
            response = await self._handled(scope, exc)
        else:
            response = accepted(job_id)
        self.answered += 1
        await response(scope, receive, send)
        return True

    async def _handled(self, scope: Scope, exc: Exception) -> Response:
        """The answer of the app's own handler for exc, as Starlette's ExceptionMiddleware
        finds it (by the exception's class and its bases); raised when there is none."""
        for cls in type(exc).__mro__:
            handler = self.api.exception_handlers.get(cls)
            if handler is not None:
                response = handler(Request(scope), exc)
                return await response if inspect.isawaitable(response) else response
        raise exc


def _read_headers(raw: list[tuple[bytes, bytes]]) -> dict[bytes, bytes] | None:
    """The headers the route reads, by (lower-case) name; None when one comes twice, and when
    the body is sent in chunks (its length is then not known before it is read)."""
    found: dict[bytes, bytes] = {}
    for name, value in raw:
        if name in _READ:
            if name in found:
                return None
            found[name] = value
        elif name == _CHUNKED:
            return None
    return found


def _idempotency_key(raw: bytes | None) -> tuple[bool, str | None]:
    """Whether the Idempotency-Key header keeps its rules (or is absent), and the key."""
    if raw is None:
        return True, None
    if len(raw) > IDEMPOTENCY_KEY_MAX or not _IDEMPOTENCY_KEY.match(raw):
        return False, None
    return True, raw.decode("ascii")


async def _whole_body(receive: Receive) -> bytes | None:
    """The request's body; None when the client went away first."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body already read, then whatever the client sends."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
