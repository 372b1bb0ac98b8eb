"""HeadBoundProtocol: uvicorn's httptools protocol with a bound on each request's head.

uvicorn bounds neither the size of a request's head (the request line and its header lines) nor
how many header lines it has: httptools keeps a header's value growing, piece by piece, for as
long as the client sends it, so one connection could hold the API's loop and memory with a
header of a hundred megabytes.

Here the parser is fed no more of a head than MAX_HEAD_BYTES. While a head is being read, what
arrives is fed in slices that stop at the bound; a head still open at the bound is answered 431
and the connection closed, without reading further (behind a pipelined request whose response
is under way, the connection is closed after that response instead). A head that ends with
more than MAX_HEADER_LINES header lines is answered 431 in place of the app. The trailer fields
after a chunked body's last chunk, which httptools gathers the same way, are bounded alike;
past the bound the connection is closed (the app may be answering the request already). Bodies
are left to the app (app/api/limits.py). A head is counted from the end of the previous request
on its connection: one that begins in the same read as that request's end may be fed the rest
of that read (some 256 KB at most) besides.
"""

from __future__ import annotations

import json

from uvicorn._types import ASGIReceiveCallable, ASGISendCallable, Scope
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

#: The most bytes of a request's head (its request line and header lines) that are read.
MAX_HEAD_BYTES = 64 * 1024
#: The most header lines a request may have.
MAX_HEADER_LINES = 100
TOO_LARGE = json.dumps(
    {
        "detail": f"the request's headers are too large: at most {MAX_HEAD_BYTES} bytes "
        f"and {MAX_HEADER_LINES} lines"
    }
).encode()
TOO_LARGE_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(TOO_LARGE)).encode()),
    (b"connection", b"close"),
]


class HeadBoundProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that refuses a request head over MAX_HEAD_BYTES or MAX_HEADER_LINES."""

    #: Bytes of the current request's head (or trailer) fed so far; None while a body is read.
    head_bytes: int | None = 0
    #: Whether what is counted may be trailer fields: after a chunk's size line, before its data.
    trailing = False

    def data_received(self, data: bytes) -> None:
        """Feed the parser what arrived, a head no further than its bound."""
        head = self.head_bytes
        if head is None or head + len(data) < MAX_HEAD_BYTES:  # nearly always: no slicing
            if head is not None:
                self.head_bytes = head + len(data)
            super().data_received(data)
        else:
            self._feed_to_bound(data)

    def _feed_to_bound(self, data: bytes) -> None:
        """Feed data in slices that end where the current head would pass its bound; refuse the
        head if it is still open there."""
        while data and self.head_bytes is not None:
            room = MAX_HEAD_BYTES - self.head_bytes
            piece, data = data[:room], data[room:]
            self.head_bytes += len(piece)
            super().data_received(piece)
            if self.transport.is_closing():
                return
            if self.head_bytes is not None and self.head_bytes >= MAX_HEAD_BYTES:
                self._refuse()
                return
        if data:
            super().data_received(data)

    def on_headers_complete(self) -> None:
        """The head is whole: serve it, or answer 431 in the app's place when it has too many
        header lines (the way uvicorn answers 503 over its concurrency limit)."""
        self.head_bytes = None
        if len(self.headers) <= MAX_HEADER_LINES:  # uvicorn's list of the request's headers
            super().on_headers_complete()
            return
        self.logger.warning("Request head over %d header lines refused.", MAX_HEADER_LINES)
        app, self.app = self.app, _too_many_lines
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def on_body(self, body: bytes) -> None:
        """Body bytes: the chunk they belong to was not the last, no trailer fields follow."""
        self.head_bytes, self.trailing = None, False
        super().on_body(body)

    def on_chunk_header(self) -> None:
        """A chunk's size line: if it is the last (no data follows), its trailer fields do."""
        self.head_bytes, self.trailing = 0, True

    def on_chunk_complete(self) -> None:
        """A chunk has been read, its trailer fields too if it was the last."""
        self.head_bytes, self.trailing = None, False

    def on_message_complete(self) -> None:
        """The request has been read whole: what comes next is a new head."""
        super().on_message_complete()
        self.head_bytes = 0

    def _refuse(self) -> None:
        """Answer 431 and close. Trailer fields: close only, the request is the app's already.
        While the previous request's response is still under way (a pipelined head), read no
        more and close once that response is sent, without a 431."""
        self.logger.warning("Request head over %d bytes refused.", MAX_HEAD_BYTES)
        if self.trailing:
            self.transport.close()
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False
            self.flow.pause_reading()
            return
        lines = [STATUS_LINE[431]]
        for name, value in [*self.server_state.default_headers, *TOO_LARGE_HEADERS]:
            lines += [name, b": ", value, b"\r\n"]
        self.transport.write(b"".join([*lines, b"\r\n", TOO_LARGE]))
        self.transport.close()


async def _too_many_lines(
    scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
) -> None:
    """The answer to a head with more than MAX_HEADER_LINES header lines."""
    await send({"type": "http.response.start", "status": 431, "headers": TOO_LARGE_HEADERS})
    await send({"type": "http.response.body", "body": TOO_LARGE, "more_body": False})
