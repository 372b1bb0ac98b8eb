"""RabbitMQ for the tests: a vhost of their own on the machine's broker (the standard local port,
guest/guest, vhosts made and deleted with rabbitmqctl), or a private broker node of their own with
settings the machine's must not be given (a consumer_timeout of seconds). Each says why when it
cannot be had, for the tests to skip with that reason."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.dev.processes import stop, wait_until
from app.dev.redis_server import free_port

HOST, PORT = "127.0.0.1", 5672
USER = PASSWORD = "guest"  # RabbitMQ's own default user: it may log in from loopback only
START_S = 60.0


class NoRabbitError(Exception):
    """No RabbitMQ for this test, and why."""


def _listens(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def _ctl(*args: str) -> None:
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        raise NoRabbitError(
            "rabbitmqctl is not on PATH: the tests cannot make a vhost of their own"
        )
    done = subprocess.run([ctl, *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise NoRabbitError(f"rabbitmqctl {' '.join(args)} failed: {done.stderr.strip()[-300:]}")


@contextmanager
def machine_vhost() -> Iterator[str]:
    """A fresh vhost on the machine's RabbitMQ for guest, deleted afterwards: its amqp:// URL."""
    if not _listens(PORT):
        raise NoRabbitError(f"no RabbitMQ listens on {HOST}:{PORT}")
    vhost = f"fairgpu-test-{secrets.token_hex(4)}"
    _ctl("add_vhost", vhost)
    try:
        _ctl("set_permissions", "-p", vhost, USER, ".*", ".*", ".*")
        yield f"amqp://{USER}:{PASSWORD}@{HOST}:{PORT}/{vhost}"
    finally:
        _ctl("delete_vhost", vhost)


def _server_binary() -> Path:
    """The broker's own start script (not Debian's wrapper, which would run it as another
    user who cannot write the test's folders)."""
    found = shutil.which("rabbitmq-server") or "/usr/lib/rabbitmq/bin/rabbitmq-server"
    binary = Path(found).resolve().parent / "rabbitmq-server"
    if not binary.is_file():
        raise NoRabbitError("no rabbitmq-server to start a broker of the test's own")
    return binary


@contextmanager
def own_broker(consumer_timeout_ms: int, tick_ms: int = 500, heartbeat_s: int = 1) -> Iterator[str]:
    """A RabbitMQ node of this test's own on a free loopback port, whose consumer_timeout is
    consumer_timeout_ms, checked every tick_ms (its channel tick; 60 s by default), and which
    asks clients for a heartbeat every heartbeat_s (60 by default): its URL."""
    binary = _server_binary()
    port, dist_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="fairgpu-rabbit-") as folder:
        base = Path(folder)
        for sub in ("mnesia", "log"):
            (base / sub).mkdir()
        (base / "plugins").write_text("[].\n")
        (base / "rabbitmq.conf").write_text(
            f"listeners.tcp.local = {HOST}:{port}\nconsumer_timeout = {consumer_timeout_ms}\n"
            f"heartbeat = {heartbeat_s}\n"
        )
        (base / "advanced.config").write_text(
            f"[{{rabbit, [{{channel_tick_interval, {tick_ms}}}]}}].\n"
        )
        node = f"fairgpu-{secrets.token_hex(4)}@localhost"
        env = {
            **os.environ,
            "HOME": str(base),  # its own Erlang cookie
            "RABBITMQ_NODENAME": node,
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_CONF_ENV_FILE": str(base / "none.env"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "plugins"),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_PID_FILE": str(base / "pid"),
        }
        with (base / "out.txt").open("wb") as out:
            server = subprocess.Popen(
                [str(binary)], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=base
            )
        try:
            try:
                wait_until(lambda: _listens(port) or server.poll() is not None, START_S, "RabbitMQ")
            except TimeoutError as exc:
                raise NoRabbitError(f"a broker of the test's own did not start: {exc}") from None
            if server.poll() is not None:
                tail = (base / "out.txt").read_text(errors="replace")[-500:]
                raise NoRabbitError(f"a broker of the test's own did not start: {tail}")
            yield f"amqp://{USER}:{PASSWORD}@{HOST}:{port}//"
        finally:
            stop(server)
