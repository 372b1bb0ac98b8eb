"""A Redis that survives losing its primary, on loopback: one primary, two replicas and three
Sentinels, each a real redis-server process (the Sentinels with --sentinel), for the failover
tests and `scripts/soak.py --sentinel`."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from app.dev import processes
from app.dev.redis_server import RedisServer, find_binary, free_port

MASTER = "fairgpu"
#: How long a primary may be silent before the Sentinels call it down (the issue's 1 s).
DOWN_AFTER_MS = 1000
START_TIMEOUT_S = 30.0


@dataclass
class SentinelSet:
    """The servers, the Sentinels and what a fairgpu process is told to find them with."""

    directory: Path
    replicas: int = 2
    sentinels: int = 3
    servers: list[RedisServer] = field(default_factory=list)
    watchers: list[tuple[int, subprocess.Popen[bytes]]] = field(default_factory=list)

    @property
    def addresses(self) -> list[str]:
        """REDIS_SENTINELS: host:port of each Sentinel."""
        return [f"127.0.0.1:{port}" for port, _ in self.watchers]

    def start(self) -> SentinelSet:
        quick = ("--repl-diskless-sync-delay", "0")  # replicas sync at once, not after 5 s
        primary = RedisServer(self.directory / "r0", appendonly=True, extra=quick).start()
        self.servers.append(primary)
        for n in range(1, self.replicas + 1):
            of = ("--replicaof", "127.0.0.1", str(primary.port), *quick)  # each may be promoted
            self.servers.append(
                RedisServer(self.directory / f"r{n}", appendonly=True, extra=of).start()
            )
        for n in range(self.sentinels):
            self.watchers.append(self._sentinel(n, primary.port))
        processes.wait_until(self._watching, START_TIMEOUT_S, "the Sentinels to see every replica")
        return self

    def _sentinel(self, n: int, primary_port: int) -> tuple[int, subprocess.Popen[bytes]]:
        folder = self.directory / f"s{n}"
        folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        conf = folder / "sentinel.conf"  # Sentinel rewrites it as it learns: its own file
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {primary_port} 2\n"
            f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER} 5000\n"
            f"sentinel parallel-syncs {MASTER} 2\n"
        )
        argv = [find_binary(), str(conf), "--sentinel"]
        return port, processes.spawn(argv, {}, folder / "sentinel.log")

    def _watching(self) -> bool:
        for port, _ in self.watchers:
            with contextlib.closing(redis.Redis(port=port, socket_timeout=1)) as sentinel:
                try:
                    replicas: Any = sentinel.sentinel_slaves(MASTER)
                    others: Any = sentinel.sentinel_sentinels(MASTER)
                except redis.RedisError:
                    return False
                if len(replicas) < self.replicas or len(others) < self.sentinels - 1:
                    return False
        return True

    def primary(self) -> RedisServer:
        """The server the Sentinels call the primary now."""
        port, _ = self.watchers[0]
        with contextlib.closing(redis.Redis(port=port, socket_timeout=1)) as sentinel:
            found: Any = sentinel.sentinel_get_master_addr_by_name(MASTER)
        _, primary_port = found
        return next(s for s in self.servers if s.port == int(primary_port))

    def stop(self) -> None:
        for _, process in self.watchers:
            processes.stop(process, grace_s=5)
        for server in self.servers:
            server.stop()


@contextlib.contextmanager
def sentinel_set(directory: Path) -> Iterator[SentinelSet]:
    """A started set, stopped afterwards."""
    started = SentinelSet(directory)
    try:
        yield started.start()
    finally:
        started.stop()
