"""A typed, synchronous HTTP client of the fairgpu API (httpx), for the `fairgpu` command and for
scripts. Every failure is one RequestError whose message is a one-line explanation."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple
from urllib.parse import quote

import httpx
from httpx_sse import SSEError, connect_sse
from pydantic import BaseModel, TypeAdapter, ValidationError

from app.client.admin_calls import AdminCalls
from app.client.sse import SseEvent, server_gave_up, sse_events
from app.client.transport import RequestError, one_line, reason, segment
from app.models import (
    EnqueueResponse,
    Health,
    JobTypeView,
    Kind,
    LogLine,
    Progress,
    Status,
    TaskLogs,
    TaskPage,
    TaskStatus,
)
from app.usage_models import AccountView, BillingRecord, UsageReport

STREAM_READ_TIMEOUT_S = 60.0  # well above the server's keep-alive (15 s), so a silence is a fault
# The server hashes and checks a whole archive (up to MAX_CODE_BYTES) before it answers.
UPLOAD_READ_TIMEOUT_S = 300.0
BILLS = TypeAdapter(list[BillingRecord])
JOB_TYPES = TypeAdapter(list[JobTypeView])


class LogBatch(BaseModel):
    """An `event: log` of a job's stream: its new log lines, and how many more the server's
    throttle left out of the stream (GET /tasks/{id}/logs has those)."""

    lines: list[LogLine]
    dropped: int = 0


#: What a job's event stream carries: a status, or a running job's progress or log lines.
JobEvent = TaskStatus | Progress | LogBatch
#: The model of each named event; an unnamed one is a status. Other names are skipped, so that
#: a newer server's events do not break this client.
EVENT_MODELS: dict[str, type[TaskStatus] | type[Progress] | type[LogBatch]] = {
    "message": TaskStatus,
    "progress": Progress,
    "log": LogBatch,
}


class Downloaded(NamedTuple):
    """What a download received: its bytes and their SHA-256 (hex)."""

    size: int
    sha256: str


class CodeUploaded(BaseModel):
    """POST /code's answer: the stored code's id (what a script job's input names) and size."""

    code_id: str
    bytes: int


class CodeInfo(CodeUploaded):
    """GET /code/{code_id}'s answer to the code's owner: also when it was first uploaded."""

    uploaded_at: float


class Uploaded(NamedTuple):
    """What an upload of a project's archive stored: its code id and its size in bytes."""

    code_id: str
    bytes: int


@dataclass
class StreamPlace:
    """Where a reader is in a job's event stream: the id of the last event it read."""

    last_id: str | None = None


class Cancelled(NamedTuple):
    """What DELETE /tasks/{id} did: the job's status, and whether it was running and is now
    only asked to stop (202) rather than revoked at once (200)."""

    task: TaskStatus
    stopping: bool


class Client(AdminCalls):
    """The fairgpu API at `url`, spoken to with the API key `key` (Transport's arguments)."""

    # -- endpoints --------------------------------------------------------------------------------
    def health(self) -> Health:
        """GET /health (no key needed)."""
        return self._parse(Health, self._request("GET", "/health"))

    def account(self) -> AccountView:
        """GET /account: who the key belongs to."""
        return self._parse(AccountView, self._request("GET", "/account"))

    def submit(
        self, kind: Kind, duration_s: float, *, idempotency_key: str | None = None
    ) -> EnqueueResponse:
        """POST /enqueue-task: queue a burn job; with an Idempotency-Key, a retry returns the
        same."""
        return self._enqueue({"kind": kind, "duration_s": duration_s}, idempotency_key)

    def submit_job(
        self,
        job_type: str,
        job_input: object = None,
        *,
        duration_s: float | None = None,
        kind: Kind | None = None,
        preemptible: bool | None = None,
        idempotency_key: str | None = None,
        gpu: dict[str, object] | None = None,
        gpus: int | None = None,
    ) -> EnqueueResponse:
        """POST /enqueue-task: queue a job of a type (GET /job-types) with its input (None: {});
        its time budget and queue are the type's unless given (`preemptible`: script jobs only;
        `gpu`: the body's need of its card, {"classes": [...], "min_memory_gb": N}; `gpus`: the
        cards it takes, else its type's least)."""
        body: dict[str, object] = {
            "type": job_type,
            "input": {} if job_input is None else job_input,
        }
        given = {
            "duration_s": duration_s,
            "kind": kind,
            "preemptible": preemptible,
            "gpu": gpu,
            "gpus": gpus,
        }
        body |= {name: value for name, value in given.items() if value is not None}
        return self._enqueue(body, idempotency_key)

    def job_types(self) -> list[JobTypeView]:
        """GET /job-types: every job type the service knows."""
        reply = self._request("GET", "/job-types")
        try:
            return JOB_TYPES.validate_json(reply.content)
        except ValidationError:
            raise self._unexpected(reply) from None

    def status(self, task_id: str) -> TaskStatus:
        """GET /task-status/{id}."""
        return self._parse(TaskStatus, self._request("GET", f"/task-status/{segment(task_id)}"))

    def logs(self, task_id: str, tail: int | None = None) -> list[LogLine]:
        """GET /tasks/{id}/logs: the job's kept log lines (only the last `tail`), oldest first."""
        params: dict[str, str | int] = {} if tail is None else {"tail": tail}
        reply = self._request("GET", f"/tasks/{segment(task_id)}/logs", params=params)
        return self._parse(TaskLogs, reply).lines

    def download(self, task_id: str, name: str, sink: BinaryIO) -> Downloaded:
        """GET /tasks/{id}/artifacts/{name}, written to `sink` as it comes; what was received.
        The caller compares it with the listed size and SHA-256."""
        path = f"/tasks/{segment(task_id)}/artifacts/{quote(name, safe='/')}"
        digest, size = hashlib.sha256(), 0
        try:
            with self._http.stream("GET", path) as reply:
                if not reply.is_success:
                    reply.read()
                    raise self._failure(reply)
                for chunk in reply.iter_bytes():
                    digest.update(chunk)
                    sink.write(chunk)
                    size += len(chunk)
        except httpx.TransportError as exc:
            if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                raise self._unreachable(exc) from None
            raise RequestError(f"the download of {name!r} broke: {reason(exc)}") from None
        return Downloaded(size, digest.hexdigest())

    def upload_code(self, archive: Path) -> Uploaded:
        """POST /code: the project's `.tar.gz` (app/client/pack.py) as the raw body, streamed
        from the file with its length, so that the server can refuse one too big at once."""
        try:
            source = archive.open("rb")
        except OSError as exc:
            raise RequestError(f"cannot read {archive}: {exc.strerror or exc}") from None
        timeout = httpx.Timeout(self.timeout_s, read=max(self.timeout_s, UPLOAD_READ_TIMEOUT_S))
        with source:
            headers = {
                "Content-Type": "application/gzip",
                # With a length httpx sends no chunked encoding, and the server knows the size.
                "Content-Length": str(os.fstat(source.fileno()).st_size),
            }
            try:
                reply = self._http.post("/code", content=source, headers=headers, timeout=timeout)
            except httpx.TransportError as exc:
                if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                    raise self._unreachable(exc) from None
                raise RequestError(f"the upload to {self.url} broke: {reason(exc)}") from None
        if not reply.is_success:
            raise self._failure(reply)
        stored = self._parse(CodeUploaded, reply)
        return Uploaded(stored.code_id, stored.bytes)

    def code_info(self, code_id: str) -> CodeInfo | None:
        """GET /code/{code_id}: the account's stored code of that id (an archive's SHA-256), or
        None when the server does not have it for this account, so it must be uploaded."""
        try:
            reply = self._request("GET", f"/code/{segment(code_id)}")
        except RequestError as exc:
            if exc.status == 404:
                return None
            raise
        return self._parse(CodeInfo, reply)

    def cancel(self, task_id: str) -> Cancelled:
        """DELETE /tasks/{id}: revoke a queued job, or ask a running one to stop."""
        reply = self._request("DELETE", f"/tasks/{segment(task_id)}")
        return Cancelled(self._parse(TaskStatus, reply), reply.status_code == 202)

    def tasks(
        self, status: Status | None = None, limit: int = 20, cursor: str | None = None
    ) -> TaskPage:
        """GET /tasks: one page of the caller's jobs, newest first."""
        params: dict[str, str | int] = {"limit": limit}
        if status is not None:
            params["status"] = status.value
        if cursor is not None:
            params["cursor"] = cursor
        return self._parse(TaskPage, self._request("GET", "/tasks", params=params))

    def all_tasks(self, status: Status | None = None, page_size: int = 100) -> Iterator[TaskStatus]:
        """Every one of the caller's jobs, newest first, following the pages' cursors."""
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            page = self.tasks(status, page_size, cursor)
            yield from page.tasks
            if page.next_cursor is None:
                return
            if page.next_cursor in seen:
                # A server that hands back a cursor twice would have us loop for ever.
                raise RequestError(f"{self.url}/tasks returned the same cursor twice")
            seen.add(page.next_cursor)
            cursor = page.next_cursor

    def billing(
        self,
        limit: int = 100,
        *,
        start: str | None = None,
        end: str | None = None,
        before: str | None = None,
    ) -> list[BillingRecord]:
        """GET /billing-records: the account's charges, newest first, billed in [start, end)
        (ISO 8601 or Unix seconds) and older than the bill of task `before`."""
        params: dict[str, str | int] = {"limit": limit}
        params |= {k: v for k, v in (("from", start), ("to", end), ("before", before)) if v}
        return self._list(BILLS, self._request("GET", "/billing-records", params=params))

    def all_billing(
        self, *, start: str | None = None, end: str | None = None, page_size: int = 1000
    ) -> Iterator[BillingRecord]:
        """Every charge in [start, end), newest first, a page at a time."""
        before: str | None = None
        while True:
            page = self.billing(page_size, start=start, end=end, before=before)
            yield from page
            if len(page) < page_size:
                return
            before = page[-1].task_id

    def usage(
        self, *, start: str | None = None, end: str | None = None, group_by: str = "account"
    ) -> UsageReport:
        """GET /usage: GPU-seconds, jobs and cost in [start, end) per group (every account's
        for an admin, the caller's own for anyone else)."""
        params: dict[str, str | int] = {"group_by": group_by}
        params |= {k: v for k, v in (("from", start), ("to", end)) if v}
        return self._parse(UsageReport, self._request("GET", "/usage", params=params))

    def cost_of(self, task_id: str, among: int = 100) -> BillingRecord | None:
        """The bill of one job, if it is among the account's `among` newest ones."""
        return next((b for b in self.billing(among) if b.task_id == task_id), None)

    def watch(self, task_id: str) -> Iterator[TaskStatus]:
        """The job's statuses as the server streams them, the last one terminal (see events)."""
        for event in self.events(task_id):
            if isinstance(event, TaskStatus):
                yield event

    def events(self, task_id: str, place: StreamPlace | None = None) -> Iterator[JobEvent]:
        """The job's events as the server streams them: its statuses, the last one terminal, and
        between them its progress and log lines. A connection that drops mid-stream is opened
        again with Last-Event-ID, at most `reconnects` times in a row; a server that cannot be
        reached at the start is an error at once. With a `place`, the stream starts after the
        event it names and moves it on as events are read, so a follow that was stopped (Ctrl-C)
        is taken up again with nothing replayed."""
        path = f"/task-status/stream/{segment(task_id)}"
        place = StreamPlace() if place is None else place
        last_id = place.last_id
        failures = 0
        while True:
            headers = {"Last-Event-ID": last_id} if last_id is not None else {}
            try:
                with contextlib.closing(self._stream_once(path, headers)) as events:
                    for event_id, event in events:
                        failures = 0  # only drops in a row count against the limit
                        last_id = place.last_id = event_id or last_id
                        if event is not None:
                            yield event
                        if isinstance(event, TaskStatus) and event.status.terminal:
                            return
            except _StreamEndedError:
                yield self.status(task_id)  # the end was seen before; its status says it
                return
            except _StreamDroppedError as drop:
                failures += 1
                if failures > self.reconnects:
                    raise RequestError(
                        f"the event stream from {self.url} kept dropping ({drop}); "
                        f"gave up after {self.reconnects} reconnects"
                    ) from None
                # Back off before trying again, as long as the server asked if it did.
                time.sleep(max(self.reconnect_delay_s * failures, (drop.retry_ms or 0) / 1000))

    # -- plumbing ---------------------------------------------------------------------------------
    def _enqueue(self, body: dict[str, object], idempotency_key: str | None) -> EnqueueResponse:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        reply = self._request("POST", "/enqueue-task", json=body, headers=headers)
        return self._parse(EnqueueResponse, reply)

    def _stream_once(
        self, path: str, headers: dict[str, str]
    ) -> Generator[tuple[str | None, JobEvent | None], None, None]:
        """One connection's events. Raises _StreamDroppedError when it breaks or ends before a
        terminal status, _StreamEndedError on a 204 (the job ended, and Last-Event-ID named its
        last event), RequestError for an error answer or a success that is not an event stream."""
        timeout = httpx.Timeout(self.timeout_s, read=STREAM_READ_TIMEOUT_S)
        resuming = "Last-Event-ID" in headers
        try:
            with connect_sse(self._http, "GET", path, headers=headers, timeout=timeout) as source:
                reply = source.response
                if reply.status_code == 204:
                    raise _StreamEndedError
                if not reply.is_success:
                    reply.read()
                    raise self._failure(reply)
                try:
                    for event in sse_events(source):
                        if event.event == "error":  # the server gave up for now: reconnect
                            raise _StreamDroppedError(server_gave_up(event), event.retry_ms)
                        yield event.id, self._event(event)
                except SSEError:
                    raise self._unexpected(reply) from None  # a 200 that is not an event stream
        except httpx.TransportError as exc:
            if not resuming and isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                raise self._unreachable(exc) from None
            raise _StreamDroppedError(reason(exc)) from None
        raise _StreamDroppedError("the server closed it before the job ended")

    def _event(self, event: SseEvent) -> JobEvent | None:
        """The event's data as its model; None for an event this client does not know."""
        model = EVENT_MODELS.get(event.event)
        if model is None:
            return None
        try:
            return model.model_validate_json(event.data)
        except ValidationError:
            raise RequestError(
                f"unexpected event from {self.url}: {one_line(event.data)[:120]}"
            ) from None


class _StreamDroppedError(Exception):
    """The event stream broke or ended before a terminal status (retry_ms: the server's
    `retry:`, when it ended the stream itself)."""

    def __init__(self, reason: str, retry_ms: int | None = None) -> None:
        super().__init__(reason)
        self.retry_ms = retry_ms


class _StreamEndedError(Exception):
    """The server answered 204: the job ended and its last event was seen already."""
