"""Helpers of the API tests: a streaming ASGI transport, an SSE reader, a worker stand-in that
moves jobs along through the real store, and a snapshot of Redis to prove nothing was written."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
from fastapi import FastAPI
from starlette.types import ASGIApp, Message

from app import pricing
from app.api.factory import create_app
from app.api.runtime import POOL_WAIT_S
from app.auth import Accounts
from app.bill import Charge
from app.models import Kind, Status
from app.settings import Settings
from app.store import JobRecord, JobRecorder
from app.wiring.service import Service, build

USERS_FILE = Path(__file__).resolve().parents[2] / "fixtures" / "users.json"

OWNER = "11111111-1111-1111-1111-111111111111"
SECOND = "22222222-2222-2222-2222-222222222222"
TEAM = "33333333-3333-3333-3333-333333333333"
KEY = {"X-API-Key": "default_api_key"}
SECOND_KEY = {"X-API-Key": "second_api_key"}
SECOND_KEY_V2 = {"X-API-Key": "second_api_key_v2"}  # listed as its SHA-256 in users.json
TEAM_KEY = {"X-API-Key": "team_api_key"}

NOT_FOUND = {"detail": "task not found"}
UNAUTHORIZED = {"detail": "missing or invalid API key (header X-API-Key)"}
UNAVAILABLE = {"detail": "the job store is unavailable; retry shortly"}
WAIT_S = 5.0  # the longest any awaited step may take before the test fails
#: The app may wait POOL_WAIT_S for one of its Redis connections before it answers at all (the
#: last of a burst on a busy machine do): a response's head is waited for that, and WAIT_S more.
HEAD_WAIT_S = POOL_WAIT_S + WAIT_S


@functools.cache
def schema_app() -> FastAPI:
    """An app whose OpenAPI schema the modules that read it at import share (app.openapi() and
    app/api/schema.py whole() build it once per app, some 0.3 s each); never lent or run."""
    return create_app(Settings(users_file=USERS_FILE))


# -- a worker stand-in ----------------------------------------------------------------------------
@dataclass
class Worker:
    """Acts as a worker through the real store and fair queues: lease, start, finish."""

    settings: Settings
    client: redis.Redis
    service: Service
    recorder: JobRecorder
    name: str = "cpu@test"

    @classmethod
    def open(cls, settings: Settings) -> Worker:
        client = redis.Redis.from_url(settings.redis_url)
        service = build(settings, Accounts.load(settings.users_file))
        return cls(settings, client, service, JobRecorder(client, settings))

    def close(self) -> None:
        self.service.celery.close()
        self.service.recorder.redis.close()
        self.client.close()

    def lease(self, kind: Kind = "short") -> str:
        """Dequeue the fairest job of the queue as a worker's run does; returns its lease token."""
        lease = self.service.queues[kind].dequeue()
        assert lease is not None, f"nothing queued in {kind}"
        return lease.token

    def start(self, job_id: str, token: str, gpu_id: int | None = 0) -> None:
        started = self.recorder.start(job_id, token, self.name, gpu_id)
        assert started.run, started.reason

    def succeed(self, job_id: str, token: str) -> bool:
        """Finish the run as a success, billed to the job's owner as the real runner does."""
        job = self._job(job_id)
        charge = self.charge(job.kind, job.duration_s)
        return self.recorder.finish(job_id, token, Status.SUCCESS, charge=charge, owner=job.owner)

    def fail(self, job_id: str, token: str, error: str) -> bool:
        charge = Charge(cost_micros=0, description="", gpu_seconds=0.0, billed_ms=0)
        owner = self._job(job_id).owner
        return self.recorder.finish(
            job_id, token, Status.FAILURE, charge=charge, owner=owner, error=error
        )

    def _job(self, job_id: str) -> JobRecord:
        job = self.recorder.get(job_id)
        assert job is not None, f"no job {job_id}"
        return job

    def charge(self, kind: Kind, duration_s: float) -> Charge:
        return pricing.price(self.settings, kind, duration_s)

    def run(self, job_id: str, kind: Kind = "short") -> str:
        """Lease, start and succeed the job (it must be the fairest one queued); the token."""
        token = self.lease(kind)
        self.start(job_id, token)
        assert self.succeed(job_id, token)
        return token


# -- Redis, before and after ----------------------------------------------------------------------
#: Commands the tests themselves send to look at Redis; everything else is the app's.
OBSERVING = frozenset({"info", "keys", "dump", "dbsize", "ping", "select", "client|setinfo"})


def command_calls(r: redis.Redis) -> dict[str, int]:
    """How many times each command has run on the server, except the observers' own."""
    stats: dict[str, Any] = r.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in stats.items()
        if name.removeprefix("cmdstat_") not in OBSERVING
    }


def contents(r: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key with its serialized value: equal snapshots mean nothing changed. The values are
    read in one round trip, a pipeline of DUMPs without MULTI (so only OBSERVING commands)."""
    keys = sorted(r.keys("*"))
    with r.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.dump(key)
        dumps = pipe.execute()
    return {key: dump for key, dump in zip(keys, dumps, strict=True)}


#: The per-second rate counters, and the commands that count a request in one (RateLimiter.spend,
#: its clock reading Redis's TIME now and then): a refused request with a valid key is counted
#: too (ErrorRate, app/api/limits.py). Counting awaits Redis, and meanwhile the app's own
#: connections may open or (un)subscribe: none of which writes anything.
RATE_COUNTERS = b"fairgpu:rate:"
COUNTING = frozenset(
    {"multi", "incrby", "expire", "exec", "time", "hello", "client", "subscribe", "unsubscribe"}
)


@dataclass
class Untouched:
    """`with Untouched(r): ...` fails unless the block leaves Redis as it was and sends it no
    command at all (the observers' INFO/KEYS/DUMP aside), but for counting its requests against
    their key's rate; `Untouched(r, counted=False)` allows not even that."""

    r: redis.Redis
    counted: bool = True
    before: dict[bytes, bytes | None] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def __enter__(self) -> Untouched:
        self.before = self._contents()
        self.calls = command_calls(self.r)
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            return
        assert self._contents() == self.before, "the request changed Redis"
        after = command_calls(self.r)
        sent = {k: v - self.calls.get(k, 0) for k, v in after.items() if v != self.calls.get(k, 0)}
        if self.counted:
            sent = {k: v for k, v in sent.items() if k not in COUNTING}
        assert sent == {}, f"the request sent Redis commands: {sent}"

    def _contents(self) -> dict[bytes, bytes | None]:
        found = contents(self.r)
        if self.counted:
            return {k: v for k, v in found.items() if not k.startswith(RATE_COUNTERS)}
        return found


class RoundTrips:
    """Counts the app's round trips to Redis from here on: the requests the server has read from
    its clients (INFO's total_reads_processed), one per round trip however many commands a
    pipeline holds, none for a script's own commands. The observer's own requests made through
    `ask` and `count` are taken off."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self._asked = 0
        self._start = self._reads()

    def _reads(self) -> int:
        stats: dict[str, Any] = self.r.info("stats")  # read by the server too: counted in it
        return int(stats["total_reads_processed"])

    def ask(self, command: str, *args: Any) -> Any:
        """Send the observer's own command (one round trip, not counted)."""
        self._asked += 1
        return self.r.execute_command(command, *args)

    def count(self) -> int:
        """The app's round trips so far."""
        trips = self._reads() - self._start - self._asked - 1
        self._asked += 1  # this INFO, for the next count
        return trips


# -- server-sent events ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    """One server-sent event: its id and its data parsed as JSON."""

    id: str | None
    data: dict[str, Any]


def parse_events(text: str) -> list[Event]:
    """The events of a whole SSE body (comments and keep-alives skipped)."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        event = _event(block.split("\n"))
        if event is not None:
            events.append(event)
    return events


def _event(lines: Iterable[str]) -> Event | None:
    event_id, data = None, []
    for line in lines:
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            event_id = value
        elif name == "data":
            data.append(value)
    return Event(event_id, json.loads("\n".join(data))) if data else None


class EventReader:
    """Reads events one at a time from a streaming response, each within a timeout."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()
        self.ended = False

    async def next(self, timeout: float = WAIT_S) -> Event | None:
        """The next event, or None when the stream has ended."""
        return await asyncio.wait_for(self._next(), timeout)

    async def _next(self) -> Event | None:
        block: list[str] = []
        async for line in self._lines:
            if line:
                block.append(line)
                continue
            event = _event(block)
            block = []
            if event is not None:
                return event
        self.ended = True
        return _event(block)


# -- a streaming ASGI transport -------------------------------------------------------------------
class StreamingASGITransport(httpx.AsyncBaseTransport):
    """Like httpx.ASGITransport, but the response body streams as the app sends it (httpx's own
    transport returns only once the app has finished, which an open SSE stream never does).
    Closing the response tells the app the client went away, then waits for it to return."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = b"".join([chunk async for chunk in request.stream])  # type: ignore[union-attr]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "server": (request.url.host, request.url.port),
            "client": ("127.0.0.1", 123),
            "root_path": "",
        }
        exchange = _Exchange(body)
        task = asyncio.create_task(exchange.run(self.app, scope))
        status, headers = await asyncio.wait_for(asyncio.shield(exchange.head), HEAD_WAIT_S)
        return httpx.Response(
            status, headers=headers, stream=_Body(exchange.chunks, exchange.gone, task)
        )


class _Exchange:
    """One request's ASGI receive and send, the response's head and body chunks as they come."""

    def __init__(self, body: bytes) -> None:
        self.body: bytes | None = body
        self.chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.head: asyncio.Future[tuple[int, list[tuple[bytes, bytes]]]] = (
            asyncio.get_running_loop().create_future()
        )
        self.gone = asyncio.Event()

    async def receive(self) -> Message:
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.head.set_result((message["status"], list(message.get("headers", []))))
        elif message["type"] == "http.response.body":
            if message.get("body"):
                self.chunks.put_nowait(message["body"])
            if not message.get("more_body", False):
                self.chunks.put_nowait(None)

    async def run(self, app: ASGIApp, scope: dict[str, Any]) -> None:
        try:
            await app(scope, self.receive, self.send)
        except Exception as exc:
            if not self.head.done():
                self.head.set_exception(exc)
            raise
        finally:
            self.chunks.put_nowait(None)
            if not self.head.done():
                self.head.set_exception(RuntimeError("the app returned without a response"))


class _Body(httpx.AsyncByteStream):
    def __init__(
        self, chunks: asyncio.Queue[bytes | None], gone: asyncio.Event, task: asyncio.Task[None]
    ) -> None:
        self._chunks, self._gone, self._task = chunks, gone, task

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (chunk := await self._chunks.get()) is not None:
            yield chunk

    async def aclose(self) -> None:
        self._gone.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), WAIT_S)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            raise AssertionError("the app did not return after the client went away") from None
