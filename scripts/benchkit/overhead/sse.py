"""Open SSE streams held by one API process: memory per stream and event delivery latency.

Each round starts a fresh API process, opens n streams to it and keeps them open:

- fairgpu: GET /task-status/stream/{id} on n PENDING jobs (no workers run, so they stay
  PENDING), each with its owner's key; a change is a cancel, DELETE /tasks/{id}, which writes
  REVOKED and its event and publishes the id; the API's one subscription wakes that stream.
- baseline: GET /stream/{i} of scripts/benchkit/overhead/trivial_api.py on the same server
  stack (uvicorn, FastAPI, sse-starlette), woken in-process by POST /poke/{i}: no Redis.

Memory per stream is the API process's VmRSS with all n streams open (each has had its first
event) minus VmRSS just before they were opened, over n. Redis connections are the entries of
Redis's CLIENT LIST at that moment, less the benchmark's own: all the API process holds, pool
and event subscription (the baseline uses no Redis). Delivery latency is from sending the
cancel (or poke) to the stream's receiving the event, one change at a time, on streams spread
over the n while all the others stay open.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis
import uvloop

from app.api.routes import jobs as jobs_api
from app.api.routing import Caller
from app.api.runtime import Runtime
from app.api.submissions import checked_submission
from app.auth import digest
from app.models import EnqueueRequest
from app.settings import Settings
from scripts.benchkit.children import embedded_redis
from scripts.benchkit.host import log, machine, raise_fd_limit, rss_kib
from scripts.benchkit.overhead import httpload
from scripts.benchkit.overhead.apis import Api, baseline_api, fairgpu_api, fairgpu_settings
from scripts.benchkit.report import Report, Section
from scripts.benchkit.stats import alternate, median, percentile, ratio

VARIANTS = ("fairgpu", "baseline")
ACCOUNTS = 16
OPENING = 64  # streams being opened at once
EVENT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Plan:
    """Streams per round, changes timed per round, rounds."""

    streams: int
    changes: int
    rounds: int


@dataclass
class Samples:
    """Per variant: KiB per stream of each round, and every delivery latency."""

    kib_per_stream: list[float] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    late: int = 0
    redis_connections: list[int] = field(default_factory=list)


@dataclass
class Stream:
    """One open stream: `opened` is set at its first event, `done` when it ends; `changed_at`
    is when its change arrived (0 when the server closed it first)."""

    path: str
    key: str
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    changed_at: float = 0.0
    ended: bool = False


async def follow(port: int, stream: Stream, gate: asyncio.Semaphore) -> None:
    """Open the stream, note its first event, then the REVOKED one."""
    async with gate:
        conn = await httpload.Connection.open(port)
        conn.writer.write(httpload.request("GET", stream.path, {"X-API-Key": stream.key}))
        status, _ = await conn.head()
        if status != 200:
            raise RuntimeError(f"GET {stream.path}: {status}")
        seen = b""
        while b"data:" not in seen:
            seen += await conn.reader.read(65536)
        stream.opened.set()
    try:
        while b"REVOKED" not in seen:
            chunk = await conn.reader.read(65536)
            if not chunk:
                stream.ended = True  # the server closed it before its change
                return
            seen = seen[-16:] + chunk
        stream.changed_at = time.perf_counter()
    finally:
        stream.done.set()
        await conn.close()


async def create_jobs(runtime: Runtime, keys: list[str], n: int) -> list[tuple[str, str]]:
    """n PENDING jobs spread over the accounts, made by the enqueue handler; (id, key) each."""
    body = EnqueueRequest(kind="short", duration_s=1.0)
    made: list[tuple[str, str]] = []
    for i in range(n):
        key = keys[i % len(keys)]
        account = runtime.accounts.authenticate(key)
        assert account is not None
        job = await checked_submission(body, runtime.job_types, runtime.settings)
        made.append((await jobs_api.submit(runtime, Caller(account, digest(key)), job, None), key))
    return made


def change_request(variant: str, stream: Stream) -> bytes:
    """The request that makes this stream's next event."""
    if variant == "fairgpu":
        task_id = stream.path.rsplit("/", 1)[1]
        return httpload.request("DELETE", f"/tasks/{task_id}", {"X-API-Key": stream.key})
    return httpload.request("POST", f"/poke/{stream.path.rsplit('/', 1)[1]}", {})


def redis_connections(url: str) -> int:
    """Connections to Redis other than this one's: the API's, as nothing else is connected."""
    with redis.Redis.from_url(url) as client:
        return len(client.client_list()) - 1


async def hold(
    api: Api, variant: str, streams: list[Stream], plan: Plan, samples: Samples, url: str = ""
) -> None:
    """Open every stream, measure the memory (and the API's Redis connections, given Redis's
    url), then time plan.changes changes."""
    before = rss_kib(api.pid)
    gate = asyncio.Semaphore(OPENING)
    tasks = [asyncio.create_task(follow(api.port, s, gate)) for s in streams]
    try:
        await asyncio.wait_for(asyncio.gather(*(s.opened.wait() for s in streams)), 600)
        samples.kib_per_stream.append((rss_kib(api.pid) - before) / len(streams))
        samples.redis_connections.append(redis_connections(url) if url else 0)
        for task in tasks:
            if task.done() and task.exception() is not None:
                raise RuntimeError("a stream failed") from task.exception()
        await changes(api, variant, streams, plan.changes, samples)
        samples.lost.append(sum(s.ended for s in streams))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def changes(
    api: Api, variant: str, streams: list[Stream], count: int, samples: Samples
) -> None:
    """Change count streams spread over all, one at a time, timing each delivery; a stream the
    server has closed meanwhile is skipped (and counted as lost by the caller)."""
    control = await httpload.Connection.open(api.port)
    step = max(1, len(streams) // max(1, count))
    try:
        for stream in streams[::step][:count]:
            if stream.done.is_set():
                continue
            sent = time.perf_counter()
            try:
                await control.call(change_request(variant, stream))
                await asyncio.wait_for(stream.done.wait(), EVENT_TIMEOUT_S)
            except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
                samples.late += 1  # not delivered within EVENT_TIMEOUT_S, or the call failed
                await control.close()
                control = await httpload.Connection.open(api.port)
                continue
            if stream.changed_at:
                samples.latencies_ms.append((stream.changed_at - sent) * 1e3)
    finally:
        await control.close()


async def warm_up(api: Api, variant: str, streams: list[Stream]) -> None:
    """Open and change a few streams first, so the process has loaded what a stream needs."""
    await hold(api, variant, streams, Plan(len(streams), len(streams), 1), Samples())


@contextlib.contextmanager
def api_for(variant: str, settings: Settings, logs: Path) -> Iterator[Api]:
    """A fresh API process of the variant."""
    if variant == "fairgpu":
        with fairgpu_api(settings, logs / "api.log") as api:
            yield api
    else:
        with baseline_api(logs / "baseline.log") as api:
            yield api


async def streams_for(variant: str, runtime: Runtime, keys: list[str], n: int) -> list[Stream]:
    """n streams to open (for fairgpu, on n fresh PENDING jobs)."""
    if variant == "fairgpu":
        jobs = await create_jobs(runtime, keys, n)
        return [Stream(f"/task-status/stream/{job}", key) for job, key in jobs]
    return [Stream(f"/stream/{i}-{time.monotonic_ns()}", "") for i in range(n)]


async def one_round(
    variant: str, settings: Settings, keys: list[str], plan: Plan, samples: Samples, logs: Path
) -> None:
    """A fresh API process, warmed up, then n streams held."""
    runtime = Runtime.open(settings)
    try:
        warm = await streams_for(variant, runtime, keys, 20)
        main = await streams_for(variant, runtime, keys, plan.streams)
    finally:
        await runtime.close()
    with api_for(variant, settings, logs) as api:
        await warm_up(api, variant, warm)
        url = settings.redis_url if variant == "fairgpu" else ""
        await hold(api, variant, main, plan, samples, url)


def measure(plan: Plan) -> dict[str, Samples]:
    """Start Redis, run the alternating rounds, each on a fresh API process."""
    raise_fd_limit()
    samples = {v: Samples() for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bench-sse-") as tmp, embedded_redis(Path(tmp)) as rs:
        settings, keys = fairgpu_settings(rs.url, Path(tmp), ACCOUNTS)
        for index, variant in alternate(plan.rounds, VARIANTS):
            uvloop.run(one_round(variant, settings, keys, plan, samples[variant], Path(tmp)))
            log(
                f"sse round {index} {variant}: {samples[variant].kib_per_stream[-1]:.1f} KiB/stream"
            )
    return samples


def report(samples: dict[str, Samples], plan: Plan) -> Report:
    """KiB per stream (median over rounds) and delivery latency percentiles."""
    columns = ("variant", "KiB/stream median", "min", "max", "delivery p50 ms", "p99 ms",
               "max ms", "changes", "undelivered", "streams lost",
               "Redis conns max")  # fmt: skip
    rows: list[tuple[object, ...]] = []
    for v in VARIANTS:
        s = samples[v]
        lat = s.latencies_ms
        rows.append((v, median(s.kib_per_stream), min(s.kib_per_stream, default=0),
                     max(s.kib_per_stream, default=0), percentile(lat, 50), percentile(lat, 99),
                     max(lat, default=0), len(lat), s.late, sum(s.lost),
                     max(s.redis_connections, default=0)))  # fmt: skip
    mine, base = samples["fairgpu"], samples["baseline"]
    result = Report(
        "sse", [Section(f"{plan.streams:,} open streams, one API process", columns, rows)]
    )
    result.notes = [
        f"{machine()}; {plan.rounds} rounds per variant, each on a fresh API process",
        f"fairgpu / baseline: memory per stream "
        f"{ratio(median(mine.kib_per_stream), median(base.kib_per_stream)):.2f}x, delivery p50 "
        f"{ratio(percentile(mine.latencies_ms, 50), percentile(base.latencies_ms, 50)):.2f}x",
    ]
    if sum(mine.lost) or mine.late:
        result.notes.append(
            f"fairgpu: {sum(mine.lost):,} streams were closed by the server before their change "
            f"arrived; {mine.late} changes were not delivered within {EVENT_TIMEOUT_S:g} s"
        )
    result.data = {v: {"kib_per_stream": samples[v].kib_per_stream,
                       "latencies_ms": samples[v].latencies_ms, "lost": samples[v].lost,
                       "undelivered": samples[v].late,
                       "redis_connections": samples[v].redis_connections}
                   for v in VARIANTS}  # fmt: skip
    return result
