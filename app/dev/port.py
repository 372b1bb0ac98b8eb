"""The API's port (and a chosen Redis port): whether the dev stack may take it, and who holds it
when it may not.

    check_free(host, port)     PortInUseError, naming the holder, unless a server could bind there
    holder(port)               "another fairgpu" or "another program", with its process if known
    listening(port)            the sockets that listen on the port (Linux's /proc), or None
    sockets_of(pid)            the sockets a process holds open, where /proc lets us look

A socket is named by its inode, in /proc/net/tcp and in /proc/<pid>/fd alike: the stack knows
its API is the one answering when the listening socket is among the API process's own. Where
there is no /proc (macOS), nothing here fails; the holder is named less precisely, and the stack
trusts a 200 from /health while its API process runs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from pathlib import Path

import httpx

#: The state of a listening socket in /proc/net/tcp.
LISTEN = "0A"
TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


class PortInUseError(RuntimeError):
    """A port the stack needs is taken (the API's, or the one chosen for its Redis); the message
    is the one line `fairgpu dev` prints."""

    def __init__(self, port: int, what: str = "port") -> None:
        super().__init__(f"{what} {port} is in use (by {holder(port)})")
        self.port = port


def check_free(host: str, port: int, what: str = "port") -> None:
    """Raise PortInUseError (its message beginning with `what` and the port) unless a server
    could listen on host:port now."""
    if not is_free(host, port):
        raise PortInUseError(port, what)


def is_free(host: str, port: int) -> bool:
    """Whether a server could listen on host:port now. SO_REUSEADDR, as uvicorn sets it: the
    connections a stopped server leaves in TIME_WAIT do not count, a listener does."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def holder(port: int) -> str:
    """Who listens on the port, as cheaply as can be told: "another fairgpu" when it answers
    /health as our API does, else "another program"; then its process, where /proc shows it."""
    who = "another fairgpu" if _answers_as_fairgpu(port) else "another program"
    process = _process_name(port)
    return f"{who}: {process}" if process else who


def _answers_as_fairgpu(port: int) -> bool:
    """Whether /health on the port answers with our API's body ({"redis", "queues", ...}),
    whatever its status (503 while its Redis is away)."""
    try:
        body = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).json()
    except (httpx.HTTPError, ValueError):
        return False
    return isinstance(body, dict) and {"redis", "queues"} <= body.keys()


def _process_name(port: int) -> str | None:
    """ "name, pid N" of the process that listens on the port, if /proc lets us see it (a
    process of another user hides its descriptors); the lowest pid when several share the
    socket, as a server's workers do."""
    inodes = listening(port)
    if not inodes:
        return None
    pids = sorted(pid for pid in _pids() if (sockets_of(pid) or set()) & inodes)
    if not pids:
        return None
    with contextlib.suppress(OSError):
        name = Path(f"/proc/{pids[0]}/comm").read_text().strip()
        return f"{name}, pid {pids[0]}"
    return f"pid {pids[0]}"


def listening(port: int) -> set[int] | None:
    """The inodes of the sockets listening on the port, at any address; None where the system
    has no /proc/net/tcp."""
    if not any(table.exists() for table in TABLES):
        return None
    inodes: set[int] = set()
    for table in TABLES:
        try:
            rows = table.read_text().splitlines()[1:]  # the first line is a header
        except OSError:
            continue
        for row in rows:
            fields = row.split()  # sl, local address (hex ip:port), remote, state, ..., inode
            if len(fields) > 9 and fields[3] == LISTEN and _port_of(fields[1]) == port:
                inodes.add(int(fields[9]))
    return inodes


def _port_of(address: str) -> int:
    return int(address.rpartition(":")[2], 16)


def sockets_of(pid: int) -> set[int] | None:
    """The inodes of the sockets the process has open; None when we cannot look (no /proc, a
    process of another user, one that is gone)."""
    inodes: set[int] = set()
    try:
        fds = os.scandir(f"/proc/{pid}/fd")
    except OSError:
        return None
    with fds, contextlib.suppress(OSError):  # it may exit while we look
        for fd in fds:
            with contextlib.suppress(OSError):
                target = os.readlink(fd.path)  # "socket:[12345]"
                if target.startswith("socket:["):
                    inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def _pids() -> list[int]:
    with contextlib.suppress(OSError):
        return [int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit()]
    return []
