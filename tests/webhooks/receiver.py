"""A webhook receiver on loopback for the tests: a real HTTP server in a thread that records
every delivery and answers each with the next status of a script (then 200); a slow one holds
every answer until the test releases them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook


@dataclass(frozen=True)
class Delivery:
    """One POST as it arrived: its path, headers (lower-case names) and body."""

    path: str
    headers: dict[str, str]
    body: bytes

    def verified(self, secret: str) -> Any:
        """The body, once its signature checks out with secret (else the verifier raises)."""
        return Webhook(secret).verify(self.body, self.headers)


class Receiver:
    """Records deliveries as they arrive; answers them with `answers` in turn, then 200; with
    `hold`, not before release()."""

    def __init__(self, answers: list[int] | None = None, hold: bool = False) -> None:
        self.answers = list(answers or [])
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
        if not hold:
            self._released.set()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/hook"

    def got(self, count: int) -> list[Delivery] | None:
        """The deliveries so far, once there are at least count of them (for wait_for)."""
        with self._lock:
            return list(self.deliveries) if len(self.deliveries) >= count else None

    def release(self) -> None:
        """Answer the deliveries held so far, and every later one at once."""
        self._released.set()

    def _record(self, delivery: Delivery) -> int:
        with self._lock:
            self.deliveries.append(delivery)
            return self.answers.pop(0) if self.answers else 200

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                code = receiver._record(Delivery(self.path, headers, body))
                receiver._released.wait()
                self.send_response(code)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test reads the deliveries, not a log

        return Handler

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def receiving(answers: list[int] | None = None) -> Iterator[Receiver]:
    """A receiver for a fixture: started, and stopped after the test."""
    with Receiver(answers) as receiver:
        yield receiver
