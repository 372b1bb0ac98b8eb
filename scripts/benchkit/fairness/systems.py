"""The two systems under test, behind one small interface.

- `FairSystem`: a whole fairgpu stack (`app.dev.stack.Stack`: embedded Redis, the API, N CPU
  workers), driven over its HTTP API only. Results come from GET /task-status.
- `FifoSystem`: N plain Celery workers (`fifo_app`) on a database of their own in the same
  Redis; jobs are published straight to the `short`/`long` Celery queues.

Both report each job as a `metrics.Run` from the timestamps the job returns.
"""

from __future__ import annotations

import functools
import json
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import redis

from app.dev import processes
from app.dev.redis_server import free_port
from app.dev.stack import Stack
from app.models import Status
from app.settings import Settings
from scripts.benchkit.children import celery_worker, spawn
from scripts.benchkit.fairness import fifo_app
from scripts.benchkit.fairness.metrics import Run
from scripts.benchkit.fairness.scenarios import Account, JobSpec, Scenario, users_file
from scripts.benchkit.polling import until

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

    def __init__(
        self,
        scenarios: Sequence[Scenario],
        workers: int,
        workdir: Path,
        half_life_s: float | None = None,
    ) -> None:
        self.workers = workers
        users = workdir / "users.json"
        users.write_text(json.dumps(users_file(scenarios, [WARMUP]), indent=1))
        settings = Settings(
            users_file=users,
            database_url=None,  # the stack's own, seeded from this users file
            port=free_port(),
            rate_limit_per_s=0,  # the scenarios submit faster than 100 requests a second
            fair_share_half_life_s=half_life_s,  # None: today's rule, no memory
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

    async def _ended(self, handle: Handle) -> dict[str, object] | None:
        """The job's state once it has ended; None before."""
        state = await self._status(handle)
        return state if Status(str(state["status"])).terminal else None

    async def finished(self, handle: Handle) -> bool:
        """Whether the job has ended."""
        return await self._ended(handle) is not None

    async def _drained(self) -> bool:
        return await self.queued() == 0

    async def collect(self, handles: Sequence[Handle], timeout_s: float) -> list[Run]:
        """Wait until every job has ended, then read their timestamps."""
        deadline = time.monotonic() + timeout_s
        await until(self._drained, timeout_s, "fairgpu's queues drained", every=0.1)
        return [await self._run_of(handle, deadline) for handle in handles]

    async def _run_of(self, handle: Handle, deadline: float) -> Run:
        left = max(0.0, deadline - time.monotonic())
        ended = functools.partial(self._ended, handle)
        state = await until(ended, left, f"job {handle.job_id} ended", every=POLL_S)
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
        env = {fifo_app.URL_ENV: self.url}
        for i in range(1, self.workers + 1):
            argv = celery_worker(
                fifo_app.__name__, fifo_app.QUEUES, f"fifo{i}@%h", "--without-heartbeat"
            )
            self.processes.append(spawn(argv, env, self.log_dir / f"fifo{i}.log"))
        processes.wait_until(self._ready, START_TIMEOUT_S, "the FIFO workers")

    def _ready(self) -> bool:
        """Whether every worker has said it consumes; RunError if one has exited."""
        if any(p.poll() is not None for p in self.processes):
            raise RunError(f"a FIFO worker exited at start; see {self.log_dir}")
        return int(self.redis.scard(fifo_app.READY_KEY)) >= self.workers

    def stop(self) -> None:
        """Stop the workers and close the connections."""
        for p in self.processes:
            processes.stop(p)
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
            left = max(0.0, deadline - time.monotonic())
            finished = functools.partial(self.finished, handle)
            await until(finished, left, f"FIFO job {handle.job_id} finished")
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
