"""Stack: the whole service on one machine, as processes: Redis (embedded unless one is given),
the API, N CPU workers, and the periodic reclaim. `fairgpu dev` runs one; so do the end-to-end
tests, which also kill its workers.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

import httpx
import redis

from app.auth import Accounts
from app.dev import processes
from app.dev.redis_server import RedisServer
from app.service import build
from app.settings import Settings

log = logging.getLogger(__name__)
START_TIMEOUT_S = 30.0


def reachable(url: str) -> bool:
    """Whether a Redis answers PING at url within a second."""
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


class Stack:
    """Redis, the API, workers and the reclaim timer, started and stopped together."""

    def __init__(
        self,
        settings: Settings,
        *,
        use_given_redis: bool = True,
        workers: int = 1,
        workdir: Path | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.settings = settings
        self._given_redis = settings.redis_url if use_given_redis else None
        self.port = settings.port
        self.worker_count = workers
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="fairgpu-")
        self.workdir = workdir or Path(self._tmp.name)  # type: ignore[union-attr]
        self.log_dir = log_dir or self.workdir
        self.redis_server: RedisServer | None = None
        self.redis_url = ""
        self.env: dict[str, str] = {}
        self.api: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self._stop = threading.Event()
        self._reclaimer: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The API's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Stack:
        """Start everything and wait until the API answers /health."""
        if self._given_redis and reachable(self._given_redis):
            self.redis_url = self._given_redis
        else:
            self.redis_server = RedisServer(self.workdir / "redis", appendonly=True).start()
            self.redis_url = self.redis_server.url
        self.settings = self.settings.model_copy(update={"redis_url": self.redis_url})
        self.env = {**os.environ, **as_environment(self.settings)}
        self.api = self._spawn("api", "app.api.serve", {})
        for i in range(1, self.worker_count + 1):
            self.start_worker(f"cpu{i}")
        self._wait_healthy()
        self._reclaimer = threading.Thread(target=self._reclaim_loop, name="reclaim", daemon=True)
        self._reclaimer.start()
        return self

    def start_worker(self, name: str, queues: str = "short,long") -> subprocess.Popen[bytes]:
        """Start one CPU worker called <name>@<host> on the given queues."""
        env = {
            "WORKER_NAME": f"{name}@{socket.gethostname()}",
            "WORKER_QUEUES": queues,
            "CUDA_VISIBLE_DEVICES": "",
        }
        process = self._spawn(name, "app.worker.main", env)
        self.workers[name] = process
        return process

    def kill_worker(self, name: str) -> None:
        """SIGKILL a worker, as a crash would."""
        process = self.workers.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=START_TIMEOUT_S)

    def _spawn(self, name: str, module: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", module]
        return processes.spawn(argv, {**self.env, **env}, self.log_dir / f"{name}.log")

    def _wait_healthy(self) -> None:
        processes.wait_until(self._healthy, START_TIMEOUT_S, "the API's /health")

    def _healthy(self) -> bool:
        """Whether the API answers /health; RuntimeError at once if its process has exited."""
        assert self.api is not None
        if self.api.poll() is not None:
            raise RuntimeError(f"the API exited at start; see {self.log_dir / 'api.log'}")
        try:
            return httpx.get(f"{self.url}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def _reclaim_loop(self) -> None:
        """The dev stack's own timer in place of Celery Beat: reclaim_and_dispatch per queue."""
        settings = self.settings
        service = build(settings, Accounts.load(settings.users_file))
        try:
            while not self._stop.wait(settings.reclaim_interval_s):
                try:
                    service.sweep()
                except (redis.RedisError, OSError):
                    log.warning("sweep of unqueued jobs failed", exc_info=True)
                for queue in service.queues.values():
                    try:
                        queue.reclaim_and_dispatch()
                    except (redis.RedisError, OSError):
                        log.warning(
                            "reclaim of %s failed; next round in %s s",
                            queue.name,
                            settings.reclaim_interval_s,
                            exc_info=True,
                        )
        finally:
            service.close()

    def stop(self) -> None:
        """Stop the timer, the workers, the API, and the Redis this stack started."""
        self._stop.set()
        children = [*self.workers.values(), *([self.api] if self.api else [])]
        if children:  # all at once, so that the slowest sets the time, not the sum
            with ThreadPoolExecutor(len(children)) as pool:
                list(pool.map(processes.stop, children))
        if self._reclaimer is not None:
            self._reclaimer.join(timeout=10)
        if self.redis_server is not None:
            self.redis_server.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def as_environment(settings: Settings) -> dict[str, str]:
    """The settings as the environment variables that make a child process read them back."""
    return {
        name.upper(): ",".join(value) if isinstance(value, list) else str(value)  # lists: a,b
        for name, value in settings.model_dump().items()
        if value is not None  # unset stays unset: "None" would not parse back
    }
