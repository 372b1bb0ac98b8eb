"""`fairgpu dev` on a port that another program holds: one line that says so, exit code 1, and
nothing started; and the stack never takes another server on its port for its own API."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.dev.port import PortInUseError, holder
from app.dev.stack import Stack
from tests.support import FIXTURES, child_environment, fast_settings, wait_for

ROOT = Path(__file__).resolve().parents[2]
FAIRGPU_HEALTH = json.dumps({"redis": "ok", "queues": {"short": 0, "long": 0}}).encode()
#: This process, as /proc names the holder of a port it listens on.
HERE = f"{Path('/proc/self/comm').read_text().strip()}, pid {os.getpid()}"


@contextlib.contextmanager
def plain_listener() -> Iterator[int]:
    """A socket that listens and never answers; its port."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


@contextlib.contextmanager
def health_server(body: bytes, port: int = 0) -> Iterator[int]:
    """An HTTP server that answers 200 with body on /health; its port."""

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def marked_processes(mark: str) -> list[int]:
    """The live processes whose environment holds mark."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and mark.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
    return found


def fairgpu_dev(port: int) -> tuple[subprocess.CompletedProcess[str], list[int]]:
    """Run `fairgpu dev --port port` to its end; what it printed, and the processes it left."""
    run = str(uuid.uuid4())  # in the environment of every process this run starts
    env = {**child_environment(), "USERS_FILE": str(FIXTURES), "FAIRGPU_PORT_TEST": run}
    env.pop("REDIS_URL", None)  # so that it would start a Redis of its own
    argv = [sys.executable, "-m", "app.client.cli", "dev", "--port", str(port), "--workers", "1"]
    done = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90, check=False
    )
    return done, marked_processes(f"FAIRGPU_PORT_TEST={run}")


@pytest.mark.integration
def test_dev_on_a_port_a_plain_listener_holds_says_so_and_starts_nothing() -> None:
    with plain_listener() as port:
        done, left = fairgpu_dev(port)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (done.stdout + done.stderr).splitlines() == [
        f"port {port} is in use (by another program: {HERE})"
    ]
    assert left == []


@pytest.mark.integration
def test_dev_on_a_port_another_fairgpu_serves_says_so_and_starts_nothing() -> None:
    with health_server(FAIRGPU_HEALTH) as port:
        done, left = fairgpu_dev(port)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (done.stdout + done.stderr).splitlines() == [
        f"port {port} is in use (by another fairgpu: {HERE})"
    ]
    assert left == []


def test_any_other_200_on_health_is_another_program() -> None:
    with health_server(b"OK") as port:
        assert holder(port) == f"another program: {HERE}"


def test_a_stack_on_a_taken_port_starts_nothing(tmp_path: Path) -> None:
    with plain_listener() as port:
        stack = Stack(fast_settings(port=port), use_given_redis=False, workdir=tmp_path)
        with pytest.raises(PortInUseError, match=f"^port {port} is in use"):
            stack.start()
    assert stack.redis_server is None
    assert stack.api is None
    assert list(tmp_path.iterdir()) == []


def test_the_stack_never_takes_another_server_for_its_api(tmp_path: Path) -> None:
    stack = Stack(fast_settings(), use_given_redis=False, workdir=tmp_path)  # not started
    # Its API, still loading: a process that has not opened its port yet.
    stack.api = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    try:
        with health_server(FAIRGPU_HEALTH, stack.port):
            assert not stack.api_answers()
    finally:
        stack.api.kill()
        stack.api.wait()


def test_the_stack_knows_its_own_api_when_it_answers(tmp_path: Path) -> None:
    stack = Stack(fast_settings(), use_given_redis=False, workdir=tmp_path)  # not started
    serve = (
        "import http.server, sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers()\n"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
    )
    stack.api = subprocess.Popen([sys.executable, "-c", serve, str(stack.port)])
    try:
        wait_for(stack.api_answers, what="the stand-in API to answer")
    finally:
        stack.api.kill()
        stack.api.wait()
