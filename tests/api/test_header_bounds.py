"""The API process bounds each request's head: past 64 KiB, or past 100 header lines, it is
refused with 431 (or the connection closed) having read little more, and other connections go on
being served. Driven over raw sockets against the real API process (app.api.serve), since the
bound is in the HTTP server, not the app."""

from __future__ import annotations

import os
import re
import select
import socket
import sys
from collections.abc import Iterator

import httpx
import pytest

from app.api.http_protocol import MAX_HEAD_BYTES, MAX_HEADER_LINES
from app.dev import processes
from app.dev.redis_server import RedisServer
from app.dev.stack import as_environment
from tests.support import fast_settings, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WAIT_S = 10.0
START = b"GET /health HTTP/1.1\r\nHost: test\r\nConnection: close\r\n"  # two header lines
MIB = 1024 * 1024
ENDLESS = b"GET /health HTTP/1.1\r\nHost: test\r\nX-Big: "  # a header line to go on with


@pytest.fixture(scope="module")
def port(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of a real API process on the suite's Redis, shared by the module's tests (none
    of them minds what Redis holds), with MAX_BODY_BYTES at 1 MiB for a body in large chunks."""
    tmp_path = tmp_path_factory.mktemp("api")
    database = f"sqlite:///{tmp_path}/api.db"
    settings = fast_settings(redis_url=redis_server.url, database_url=database, max_body_bytes=MIB)
    env = {**os.environ, **as_environment(settings)}
    api = processes.spawn([sys.executable, "-m", "app.api.serve"], env, tmp_path / "api.log")
    try:
        wait_for(lambda: health(settings.port) == 200, what="the API's /health")
        yield settings.port
    finally:
        processes.stop(api)


def health(port: int) -> int | None:
    """GET /health's status on a fresh connection; None while the API does not answer."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=WAIT_S).status_code
    except httpx.HTTPError:
        return None


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def reply(sock: socket.socket) -> bytes | None:
    """Everything the server sends until it closes; None if it reset the connection first."""
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        return got or None
    return got


def status(answer: bytes | None) -> int | None:
    """The status of a raw HTTP answer (None for none)."""
    return None if not answer else int(answer.split(b" ", 2)[1])


def exchange(port: int, head: bytes) -> bytes | None:
    """Send a whole request head at once and read the answer."""
    with connect(port) as sock:
        sock.sendall(head)
        return reply(sock)


def header_lines(count: int) -> bytes:
    """A head with `count` header lines in all (START's two among them)."""
    extra = b"".join(b"X-Line-%d: %d\r\n" % (i, i) for i in range(count - 2))
    return START + extra + b"\r\n"


def head_of(size: int) -> bytes:
    """A complete head of exactly `size` bytes, most of them in one header's value."""
    fixed = len(START + b"X-Big: \r\n\r\n")
    return START + b"X-Big: " + b"a" * (size - fixed) + b"\r\n\r\n"


def stream_header(
    port: int, piece: int, cap: int, pace_s: float, start: bytes = ENDLESS
) -> tuple[int, bytes | None]:
    """Send `start`, then more of its last header line, which never ends, `piece` bytes a send,
    looking for an answer for up to pace_s after each, until one comes, the server closes, or
    cap bytes are sent. Returns the bytes sent and what came back (None: nothing, or the
    connection reset)."""
    with connect(port) as sock:
        sock.sendall(start)
        sent = 0
        chunk = b"a" * piece
        while sent < cap:
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                return sent, reply(sock)
            sent += piece
            if select.select([sock], [], [], pace_s)[0]:
                return sent, reply(sock)
        return sent, None


def test_a_head_at_the_bound_is_served_and_one_byte_more_is_refused(port: int) -> None:
    assert status(exchange(port, head_of(MAX_HEAD_BYTES))) == 200
    refused = exchange(port, head_of(MAX_HEAD_BYTES + 1))
    assert status(refused) == 431
    assert refused is not None and b'"detail"' in refused


def test_more_than_100_header_lines_are_refused(port: int) -> None:
    assert status(exchange(port, header_lines(MAX_HEADER_LINES))) == 200
    refused = exchange(port, header_lines(MAX_HEADER_LINES + 1))
    assert status(refused) == 431
    assert refused is not None and b"100 lines" in refused


def test_a_header_streamed_slowly_is_refused_soon_after_64_kib(port: int) -> None:
    sent, answer = stream_header(port, piece=1024, cap=MIB, pace_s=0.01)
    # Small pieces, each given time to be read alone: the bound counts a head across reads.
    assert sent < MAX_HEAD_BYTES + 64 * 1024, sent
    assert status(answer) in (431, None)
    assert health(port) == 200


def test_a_huge_header_sent_at_once_is_refused_long_before_its_end(port: int) -> None:
    sent, answer = stream_header(port, piece=64 * 1024, cap=64 * MIB, pace_s=0)
    # What was sent beyond 64 KiB sat in the two sockets' buffers when the server gave up.
    assert sent < 16 * MIB, sent
    assert status(answer) in (431, None)
    assert health(port) == 200


def test_a_pipelined_head_past_the_bound_ends_the_connection_after_the_answer_before_it(
    port: int,
) -> None:
    first = b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n"
    sent, answer = stream_header(port, 64 * 1024, 64 * MIB, pace_s=0, start=first + ENDLESS)
    assert sent < 16 * MIB, sent
    # The first request is answered whole; then a 431, unless it was still being answered.
    assert answer is not None
    assert re.findall(rb"HTTP/1.1 (\d{3})", answer) in ([b"200"], [b"200", b"431"])


def test_trailer_fields_past_the_bound_close_the_connection(port: int) -> None:
    chunked = b"POST /enqueue-task HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
    last_chunk = b"2\r\n{}\r\n0\r\n"  # then the trailer fields, the first of which never ends
    start = chunked + last_chunk + b"X-Big: "
    sent, _ = stream_header(port, piece=64 * 1024, cap=64 * MIB, pace_s=0, start=start)
    assert sent < 16 * MIB, sent
    assert health(port) == 200


def test_a_chunked_body_in_large_chunks_is_not_mistaken_for_trailer_fields(port: int) -> None:
    chunk = b" " * (4 * MAX_HEAD_BYTES) + b'{"kind": "short", "duration_s": 1}'
    head = b"POST /enqueue-task HTTP/1.1\r\nHost: test\r\nConnection: close\r\n"
    head += b"X-API-Key: default_api_key\r\n"
    head += b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(chunk), chunk)
    assert status(exchange(port, head + body)) == 200  # read whole (MAX_BODY_BYTES is 1 MiB)


def test_other_connections_are_served_while_a_head_is_incomplete(port: int) -> None:
    with connect(port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\nX-Big: " + b"a" * 60_000)
        assert health(port) == 200
        sock.sendall(b"\r\nConnection: close\r\n\r\n")
        assert status(reply(sock)) == 200
