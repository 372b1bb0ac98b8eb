"""The two systems under test, behind one small interface.

- `FairSystem`: a whole fairgpu stack (`app.devstack.Stack`: embedded Redis, the API, N CPU
  workers), driven over its HTTP API only. Results come from GET /task-status.
- `FifoSystem`: N plain Celery workers (`fifo_app`) on a database of their own in the same
  Redis; jobs are published straight to the `short`/`long` Celery queues.

Both report each job as a `metrics.Run` from the timestamps the job returns.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import redis

from app.dev.redis_server import free_port
from app.dev.stack import Stack
from app.settings import Settings

from . import fifo_app
from .metrics import Run
from .scenarios import Account, JobSpec, Scenario, users_file

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = frozenset({"SUCCESS", "FAILURE", "REVOKED"})
POLL_S = 0.02  # between looks at a job or a queue while a scenario runs
START_TIMEOUT_S = 60.0
WARMUP = Account("fairness-warmup")


class RunError(RuntimeError):
    """A job was refused or did not succeed."""


@dataclass(frozen=True)
class Handle:
    """A submitted job: its spec and the id the system gave it."""

    spec: JobSpec
    job_id: str


class System(Protocol):
    """What the scenario runner needs of a system."""

    name: str
    workers: int

    async def submit(self, spec: JobSpec) -> Handle: ...

    async def queued(self) -> int: ...

    async def finished(self, handle: Handle) -> bool: ...

    async def collect(self, handles: Sequence[Handle], timeout_s: float) -> list[Run]: ...


class FairSystem:
    """fairgpu, over HTTP."""

    name = "fairgpu"

    def __init__(self, scenarios: Sequence[Scenario], workers: int, workdir: Path) -> None:
        self.workers = workers
        users = workdir / "users.json"
        users.write_text(json.dumps(users_file(scenarios, [WARMUP]), indent=1))
        settings = Settings(
            users_file=users,
            port=free_port(),
            rate_limit_per_s=0,  # the scenarios submit faster than 100 requests a second
        )
        (workdir / "fair").mkdir()
        self.stack = Stack(
            settings, use_given_redis=False, workers=workers, workdir=workdir / "fair"
        )
        self.client: httpx.AsyncClient | None = None

    def start(self) -> None:
        """Start the stack (Redis, API, workers)."""
        self.stack.start()

    @property
    def redis_url(self) -> str:
        """The URL of the stack's Redis."""
        return self.stack.redis_url

    def stop(self) -> None:
        """Stop the stack."""
        self.stack.stop()

    def _http(self) -> httpx.AsyncClient:
        if self.client is None:
            self.client = httpx.AsyncClient(base_url=self.stack.url, timeout=30)
        return self.client

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    async def submit(self, spec: JobSpec) -> Handle:
        """POST /enqueue-task with the spec's key."""
        body = {"kind": spec.kind, "duration_s": spec.duration}
        reply = await self._http().post("/enqueue-task", json=body, headers={"X-API-Key": spec.key})
        if reply.status_code != 200:
            raise RunError(f"submit refused: HTTP {reply.status_code} {reply.text[:200]}")
        return Handle(spec, str(reply.json()["task_id"]))

    async def queued(self) -> int:
        """Jobs queued (not started) in both fair queues, from GET /health."""
        reply = await self._http().get("/health")
        return int(sum(reply.json()["queues"].values()))

    async def _status(self, handle: Handle) -> dict[str, object]:
        reply = await self._http().get(
            f"/task-status/{handle.job_id}", headers={"X-API-Key": handle.spec.key}
        )
        reply.raise_for_status()
        state: dict[str, object] = reply.json()
        return state

    async def finished(self, handle: Handle) -> bool:
        """Whether the job has ended."""
        return (await self._status(handle))["status"] in TERMINAL

    async def collect(self, handles: Sequence[Handle], timeout_s: float) -> list[Run]:
        """Wait until every job has ended, then read their timestamps."""
        deadline = time.monotonic() + timeout_s
        while await self.queued() > 0:
            if time.monotonic() > deadline:
                raise RunError("jobs still queued at the deadline")
            await asyncio.sleep(0.1)  # the queues drain at the workers' pace
        runs: list[Run] = []
        for handle in handles:
            runs.append(await self._run_of(handle, deadline))
        return runs

    async def _run_of(self, handle: Handle, deadline: float) -> Run:
        while (state := await self._status(handle))["status"] not in TERMINAL:
            if time.monotonic() > deadline:
                raise RunError(f"job {handle.job_id} still {state['status']} at the deadline")
            await asyncio.sleep(POLL_S)  # it is running
        result = state.get("result")
        if state["status"] != "SUCCESS" or not isinstance(result, dict):
            raise RunError(f"job {handle.job_id} ended {state['status']}: {state.get('error')}")
        return Run(
            account=handle.spec.account,
            enqueued=float(result["enqueued_at"]),
            started=float(result["started_at"]),
            finished=float(result["finished_at"]),
            worker=str(result["worker"]),
            duration=handle.spec.duration,
        )


def _text(value: bytes | str) -> str:
    """A Redis reply as text."""
    return value.decode() if isinstance(value, bytes) else value


class FifoSystem:
    """Plain Celery FIFO queues, published to directly."""

    name = "fifo"

    def __init__(self, redis_url: str, workers: int, log_dir: Path) -> None:
        self.workers = workers
        self.url = redis_url.rsplit("/", 1)[0] + "/1"  # database 1: fairgpu uses 0
        self.log_dir = log_dir
        self.redis = redis.Redis.from_url(self.url)
        self.celery = fifo_app.make_app(self.url)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.submitted = 0

    def start(self) -> None:
        """Start the workers and wait until each says it consumes."""
        self.redis.flushdb()
        env = {**os.environ, fifo_app.URL_ENV: self.url, "PYTHONPATH": str(ROOT)}
        for i in range(1, self.workers + 1):
            with (self.log_dir / f"fifo{i}.log").open("ab") as out:
                self.processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "celery", "-A", "scripts.fairness.fifo_app",
                         "worker", "--pool", "solo", "--concurrency", "1",
                         "--prefetch-multiplier", "1", "--queues", "short,long",
                         "--hostname", f"fifo{i}@%h", "--without-gossip", "--without-mingle",
                         "--without-heartbeat", "--loglevel", "WARNING"],
                        cwd=ROOT, env=env, stdout=out, stderr=out,
                    )
                )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while int(self.redis.scard(fifo_app.READY_KEY)) < self.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                raise RunError(f"FIFO workers did not start; see {self.log_dir}")
            time.sleep(0.1)  # polling the workers' ready marks

    def stop(self) -> None:
        """Stop the workers and close the connections."""
        for p in self.processes:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.processes:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.celery.close()
        self.redis.close()

    async def aclose(self) -> None:
        """Nothing asynchronous to close."""

    async def submit(self, spec: JobSpec) -> Handle:
        """Write the job's hash with its enqueue time, then publish it to its queue."""
        job_id = uuid.uuid4().hex
        self.redis.hset(
            fifo_app.job_key(job_id),
            mapping={"enqueued": time.time(), "account": spec.account},
        )
        self.celery.send_task(fifo_app.TASK_NAME, args=[job_id, spec.duration], queue=spec.kind)
        self.submitted += 1
        return Handle(spec, job_id)

    async def queued(self) -> int:
        """Jobs published and not started."""
        return self.submitted - int(self.redis.get(fifo_app.STARTED_KEY) or 0)

    async def finished(self, handle: Handle) -> bool:
        """Whether the job has recorded its end."""
        return bool(self.redis.hexists(fifo_app.job_key(handle.job_id), "finished"))

    async def collect(self, handles: Sequence[Handle], timeout_s: float) -> list[Run]:
        """Wait until every job has recorded its end, then read their timestamps."""
        deadline = time.monotonic() + timeout_s
        runs: list[Run] = []
        for handle in handles:
            while not await self.finished(handle):
                if time.monotonic() > deadline:
                    raise RunError(f"FIFO job {handle.job_id} not finished at the deadline")
                await asyncio.sleep(0.05)  # the workers drain the queue at their pace
            raw = self.redis.hgetall(fifo_app.job_key(handle.job_id))
            runs.append(
                Run(
                    account=handle.spec.account,
                    enqueued=float(raw[b"enqueued"]),
                    started=float(raw[b"started"]),
                    finished=float(raw[b"finished"]),
                    worker=_text(raw[b"worker"]),
                    duration=handle.spec.duration,
                )
            )
        return runs
