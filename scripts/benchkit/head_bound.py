"""What the bound on request heads costs a request: uvicorn's HttpToolsProtocol against
fairgpu's HeadBoundProtocol (app/api/http_protocol.py), side by side in one process.

Each variant is fed the submit benchmark's request (scripts/benchkit/overhead/enqueue.py),
whole, `requests` times on one connection with a transport that keeps nothing; the app is never
run (each request's response is marked sent at once), so what is timed is the protocol and the
parser alone: the part of a request that the bound can change.

    uv run python scripts/bench_head_bound.py [--rounds 15] [--requests 30000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from app.api.http_protocol import HeadBoundProtocol
from scripts.benchkit.overhead.enqueue import BODY
from scripts.benchkit.overhead.httpload import request
from scripts.benchkit.stats import alternate, median

REQUEST = request(
    "POST",
    "/enqueue-task",
    {"X-API-Key": "bench-key-00001", "Content-Type": "application/json"},
    BODY,
)
VARIANTS: dict[str, type[HttpToolsProtocol]] = {
    "uvicorn": HttpToolsProtocol,
    "head-bound": HeadBoundProtocol,
}


class _Transport:
    """A connection that accepts everything and sends nothing."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name)

    def write(self, data: bytes) -> None: ...
    def close(self) -> None: ...
    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


async def _never(scope: Any, receive: Any, send: Any) -> None:
    """The app; never started."""


def _answered_at_once(base: type[HttpToolsProtocol]) -> type[HttpToolsProtocol]:
    """The protocol, with each request's response taken as sent instead of running the app."""

    class Answered(base):  # type: ignore[valid-type,misc]
        def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
            cycle.response_complete = True

    return Answered


def per_request_us(protocol: type[HttpToolsProtocol], requests: int) -> float:
    """Microseconds per request of feeding REQUEST to a fresh connection, requests times."""
    loop = asyncio.new_event_loop()
    try:
        config = Config(app=_never, lifespan="off", access_log=False, log_level="warning")
        config.load()
        connection = _answered_at_once(protocol)(config, ServerState(), {}, _loop=loop)
        connection.connection_made(_Transport())  # type: ignore[arg-type]
        began = time.perf_counter()
        for _ in range(requests):
            connection.data_received(REQUEST)
        return (time.perf_counter() - began) / requests * 1e6
    finally:
        loop.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Alternate the variants, then print each one's median and the difference."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--requests", type=int, default=30_000)
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _, name in alternate(args.rounds, list(VARIANTS)):
        times[name].append(per_request_us(VARIANTS[name], args.requests))
    for name, values in times.items():
        spread = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name}: median {median(values):.2f} us a request ({spread})")
    extra = median(times["head-bound"]) - median(times["uvicorn"])
    print(f"the bound costs {extra:+.2f} us a request")
    return 0
