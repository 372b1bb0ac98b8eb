"""A lean HTTP/1.1 load generator on asyncio streams: keep-alive connections, one request at a
time on each, every request's latency measured. Lighter than an HTTP client library, so that on
a small machine the load generator takes as little CPU from the server as it can."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

HOST = "127.0.0.1"


def request(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    """The bytes of one request."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Connection:
    """One keep-alive connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        """Connect to the server on this machine."""
        reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 20)
        return cls(reader, writer)

    async def head(self) -> tuple[int, dict[str, str]]:
        """Read a response's status line and headers."""
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = raw.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(status_line.split()[1]), headers

    async def call(self, raw: bytes) -> tuple[int, bytes]:
        """Send one request, read its whole (Content-Length) response."""
        self.writer.write(raw)
        status, headers = await self.head()
        body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return status, body

    async def close(self) -> None:
        """Close it."""
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


@dataclass
class LoadResult:
    """Requests, their latencies and statuses, over one run."""

    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def per_second(self) -> float:
        """Requests a second over the run."""
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0


async def closed_loop(
    port: int, make: Callable[[int, int], bytes], clients: int, seconds: float
) -> LoadResult:
    """clients connections, each sending make(client, n) one after the other for seconds."""
    result = LoadResult()
    connections = [await Connection.open(port) for _ in range(clients)]
    deadline = time.perf_counter() + seconds

    async def client(index: int, conn: Connection) -> None:
        n = 0
        while time.perf_counter() < deadline:
            raw = make(index, n)
            sent = time.perf_counter()
            status, _ = await conn.call(raw)
            result.latencies_ms.append((time.perf_counter() - sent) * 1e3)
            result.statuses[status] = result.statuses.get(status, 0) + 1
            n += 1

    began = time.perf_counter()
    try:
        await asyncio.gather(*(client(i, c) for i, c in enumerate(connections)))
    finally:
        result.seconds = time.perf_counter() - began
        for conn in connections:
            await conn.close()
    return result
