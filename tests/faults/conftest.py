"""Fault-injection fixtures: a whole stack of real processes, and the means to hurt it.

Each test starts its own Redis (append-only, fsync "always", so a SIGKILL loses nothing that was
acknowledged), the API and Celery workers, with a 2 s lease, a 0.5 s heartbeat and a 0.5 s
reclaim, so recovery takes seconds. The tests speak HTTP for what a client sees, and read Redis
directly for what a client cannot see: leases, queue lengths, billing lists, the runs recorded by
the fault workers (tests/faults/worker_app.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from app.dev.processes import wait_until
from app.dev.redis_server import RedisServer
from app.dev.stack import Stack
from app.models import KINDS
from app.settings import Settings
from app.store.keys import billed_key, job_key
from app.vtrr.keys import Keys
from tests.faults.worker_app import RUNS_KEY
from tests.support import DEMO_KEY, OTHER_KEY, TEAM_KEY, bills_of, fast_settings, wait_for

USER_OF = {
    DEMO_KEY: "11111111-1111-1111-1111-111111111111",
    OTHER_KEY: "22222222-2222-2222-2222-222222222222",
    TEAM_KEY: "33333333-3333-3333-3333-333333333333",
}
TERMINAL = ("SUCCESS", "FAILURE", "REVOKED")
APP_WORKER = "app.worker.main"
FAULT_WORKER = "tests.faults.worker_app"


def fault_settings(**overrides: object) -> Settings:
    """The fast settings of tests/support.py, with an attempt limit the poison test relies on."""
    return fast_settings(**{"max_attempts": 3, **overrides})


class FaultStack(Stack):
    """A Stack whose workers run worker_module (app.worker, or the fault worker)."""

    def __init__(self, settings: Settings, *, worker_module: str, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.worker_module = worker_module

    def _spawn(self, name: str, module: str, env: dict[str, str]) -> Any:
        if module == APP_WORKER:
            module = self.worker_module
        return super()._spawn(name, module, env)

    def log_of(self, name: str) -> str:
        """What a process of the stack has logged so far."""
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@dataclass
class Faults:
    """One stack under test, its Redis, and the client's and the operator's views of it."""

    stack: FaultStack
    redis_server: RedisServer
    r: redis.Redis = field(repr=False)
    proxy: RedisProxy | None = None

    # -- what a client sees (HTTP) --------------------------------------------------------------
    def call(
        self, method: str, path: str, key: str, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> httpx.Response:
        """One request as a polite client sends it: a 429 (the key's rate limit) is sent again
        after a pause, for up to 30 s; every other answer is returned as it is."""
        headers = {"X-API-Key": key, **(headers or {})}
        replies: list[httpx.Response] = []

        def answered() -> bool:
            url = f"{self.stack.url}{path}"
            replies.append(httpx.request(method, url, headers=headers, **kwargs))
            return replies[-1].status_code != 429

        with contextlib.suppress(TimeoutError):  # still a 429: the test sees it
            wait_until(answered, 30, "an answer other than 429", every=0.2)
        return replies[-1]

    def post(
        self,
        key: str,
        kind: str = "short",
        duration_s: float = 0.2,
        idempotency_key: str | None = None,
    ) -> httpx.Response:
        """POST /enqueue-task, whatever the answer."""
        return self.call(
            "POST",
            "/enqueue-task",
            key,
            json={"kind": kind, "duration_s": duration_s},
            headers={"Idempotency-Key": idempotency_key} if idempotency_key else None,
            timeout=60,
        )

    def submit(self, key: str, kind: str = "short", duration_s: float = 0.2) -> str:
        """Submit a job that must be accepted; its task id."""
        reply = self.post(key, kind, duration_s)
        assert reply.status_code == 200, reply.text
        return str(reply.json()["task_id"])

    def status(self, key: str, task_id: str) -> dict[str, Any]:
        """GET /task-status/<id>, which must answer 200."""
        reply = self.call("GET", f"/task-status/{task_id}", key, timeout=30)
        assert reply.status_code == 200, reply.text
        return dict(reply.json())

    def finished(self, key: str, task_id: str) -> dict[str, Any] | None:
        """The job's status once it has ended, else None."""
        state = self.status(key, task_id)
        return state if state["status"] in TERMINAL else None

    def started(self, key: str, task_id: str) -> dict[str, Any] | None:
        """The job's status while it runs, else None."""
        state = self.status(key, task_id)
        return state if state["status"] == "STARTED" else None

    def wait_all(
        self, key: str, task_ids: list[str], timeout: float = 60.0
    ) -> dict[str, dict[str, Any]]:
        """Wait until every job has ended; their final states."""
        done: dict[str, dict[str, Any]] = {}

        def all_done() -> bool:
            for task_id in task_ids:
                if task_id not in done and (state := self.finished(key, task_id)):
                    done[task_id] = state
            return len(done) == len(task_ids)

        wait_for(all_done, timeout=timeout, what=f"{len(task_ids)} jobs to end")
        return done

    def bills(self, key: str) -> list[dict[str, Any]]:
        """GET /billing-records of the key's account."""
        reply = self.call("GET", "/billing-records", key, params={"limit": 1000}, timeout=30)
        assert reply.status_code == 200, reply.text
        return list(reply.json())

    def health(self) -> int:
        """The status code of GET /health (0 when the API does not answer at all)."""
        try:
            return httpx.get(f"{self.stack.url}/health", timeout=10).status_code
        except httpx.HTTPError:
            return 0

    # -- what only the operator sees (Redis) ----------------------------------------------------
    def job(self, task_id: str) -> dict[str, str]:
        """The job's hash."""
        return dict(self.r.hgetall(job_key(task_id)))

    def billed_ids(self, key: str) -> list[str]:
        """The task ids in the account's billing list, one per record."""
        database = self.stack.settings.database
        return [b.task_id for b in bills_of(self.r, USER_OF[key], database)]

    def billed_marker(self, task_id: str) -> bool:
        """Whether the job's "billed" marker exists."""
        return bool(self.r.exists(billed_key(task_id)))

    def runs(self, task_id: str) -> list[str]:
        """The workers that started a run of the job (fault workers only), in order."""
        runs = [line.split(" ", 1) for line in self.r.lrange(RUNS_KEY, 0, -1)]
        return [worker for job, worker in runs if job == task_id]

    def job_ids(self) -> set[str]:
        """Every job record in Redis."""
        prefix = job_key("")
        return {k.removeprefix(prefix) for k in self.r.scan_iter(match=f"{prefix}*", count=1000)}

    def queue_items(self) -> dict[str, set[str]]:
        """Per fair queue: the ids of the items queued, in flight, or known at all."""
        found: dict[str, set[str]] = {}
        for kind in KINDS:
            keys = Keys.for_queue(kind)
            items = self.r.scan_iter(match=f"{keys.item}*", count=1000)
            found[kind] = {k.removeprefix(keys.item) for k in items}
        return found

    def drained(self) -> bool:
        """Whether both fair queues hold nothing: nothing queued, nothing in flight."""
        return not any(self.queue_items().values())

    def worker_pids(self) -> dict[str, int]:
        """The pid of each worker process, by name."""
        return {name: p.pid for name, p in self.stack.workers.items()}


@pytest.fixture
def make_faults(tmp_path: Path) -> Iterator[Callable[..., Faults]]:
    """Start Redis (AOF, fsync always), the API and n workers; all stopped after the test.

    worker_module picks app.worker or the fault worker. With proxied, the service's processes
    reach Redis through a RedisProxy (Faults.proxy); the test's own client never does."""
    started: list[Faults] = []

    def start(
        workers: int = 1,
        *,
        worker_module: str = APP_WORKER,
        proxied: bool = False,
        **overrides: object,
    ) -> Faults:
        workdir = tmp_path / f"stack{len(started)}"
        workdir.mkdir()
        server = RedisServer(workdir / "redis", appendonly=True, fsync="always").start()
        proxy = RedisProxy(server.port) if proxied else None
        url = proxy.url if proxy else server.url
        stack = FaultStack(
            fault_settings(redis_url=url, **overrides),
            use_given_redis=True,
            workers=workers,
            workdir=workdir,
            worker_module=worker_module,
        )
        faults = Faults(stack, server, redis.Redis.from_url(server.url, decode_responses=True))
        faults.proxy = proxy
        started.append(faults)
        stack.start()
        return faults

    yield start
    for faults in started:
        for process in faults.stack.workers.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)  # a frozen worker could not stop
        faults.stack.stop()
        if faults.proxy is not None:
            faults.proxy.close()
        faults.r.close()
        faults.redis_server.stop()


class Supervisor:
    """Restarts every worker of the stack that dies, under the same name, as a process manager
    would; deaths lists (name, exit code) of each one it saw."""

    def __init__(self, stack: Stack, every: float = 0.1) -> None:
        self.stack = stack
        self.every = every
        self.deaths: list[tuple[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(self.every):
            for name, process in list(self.stack.workers.items()):
                code = process.poll()
                if code is not None:
                    self.deaths.append((name, code))
                    self.stack.start_worker(name)

    def __enter__(self) -> Supervisor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class RedisProxy:
    """A TCP proxy in front of Redis that can fail at the worst moment of one command.

    cut_before(pattern): the next command whose bytes contain pattern never reaches Redis; every
    connection is closed and new ones are refused until heal() (Redis "goes down" right there).
    drop_reply(pattern): the next command containing pattern runs in Redis, but its reply is
    swallowed and that connection closed (the network fails after the write, before the answer).
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._refusing = False
        self._trap: tuple[bytes, str] | None = None
        self.fired = threading.Event()
        self._acceptor = threading.Thread(target=self._accept, name="proxy", daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        """The redis:// URL of the proxy."""
        return f"redis://127.0.0.1:{self.port}/0"

    def cut_before(self, pattern: bytes) -> None:
        """Arm: the next command containing pattern brings "Redis" down before it runs."""
        with self._lock:
            self._trap = (pattern, "before")

    def drop_reply(self, pattern: bytes) -> None:
        """Arm: the next command containing pattern runs, and its reply is lost."""
        with self._lock:
            self._trap = (pattern, "after")

    def heal(self) -> None:
        """Accept connections again."""
        with self._lock:
            self._refusing = False

    def close(self) -> None:
        """Stop accepting and close every connection."""
        _shut(self._listener)  # shutdown() wakes the blocked accept(); close() alone would not
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()
        self._acceptor.join(timeout=5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # the listener was closed
            with self._lock:
                refusing = self._refusing
            if refusing:
                _shut(client)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                _shut(client)
                continue
            link = _Link(self, client, upstream)
            with self._lock:
                self._links.add(link)
            link.start()

    def _spring(self, data: bytes) -> str | None:
        """The trap's mode if data springs it (and disarm it), else None."""
        with self._lock:
            if self._trap is None or self._trap[0] not in data:
                return None
            mode = self._trap[1]
            self._trap = None
            if mode == "before":
                self._refusing = True
            return mode

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

    def _cut_all(self) -> None:
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()


class _Link:
    """One client connection and its upstream connection, pumped by two threads."""

    def __init__(self, proxy: RedisProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy, self.client, self.upstream = proxy, client, upstream
        self.swallow = False

    def start(self) -> None:
        threading.Thread(target=self._requests, daemon=True).start()
        threading.Thread(target=self._replies, daemon=True).start()

    def _requests(self) -> None:
        try:
            while data := self.client.recv(65536):
                mode = self.proxy._spring(data)
                if mode == "before":
                    self.proxy.fired.set()
                    self.proxy._cut_all()
                    return
                if mode == "after":
                    self.swallow = True
                self.upstream.sendall(data)
        except OSError:
            pass
        finally:
            self.close()

    def _replies(self) -> None:
        try:
            while data := self.upstream.recv(65536):
                if self.swallow:
                    self.proxy.fired.set()
                    return  # the command ran; its answer never arrives
                self.client.sendall(data)
        except OSError:
            pass
        finally:
            self.close()

    def close(self) -> None:
        _shut(self.client)
        _shut(self.upstream)
        self.proxy._forget(self)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
