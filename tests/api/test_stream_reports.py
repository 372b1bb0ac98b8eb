"""The event stream's named events: a running job's progress and log lines, each `event:
progress` or `event: log` with an id, between the unnamed status events; replayed for a stream
opened late, resumable with Last-Event-ID, and live for a stream opened before them. The
reports are written as the worker's scripts write them: XADD to the job's event stream, then
PUBLISH on its channel."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis

from app.store.keys import events_key, job_channel, job_key
from tests.api.conftest import Api
from tests.api.helpers import KEY, WAIT_S, Worker

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): each test closes its streams,
    which shared_api checks."""
    return shared_api


PROGRESS = {"fraction": 0.5, "message": "epoch 2 of 4"}
LOG = {"lines": [{"at": 1.5, "stream": "stdout", "text": "loss 0.3"}], "dropped": 2}


@dataclass(frozen=True)
class Sse:
    """One server-sent event: its name (None for a status), id and JSON data."""

    event: str | None
    id: str | None
    data: Any


def _parse(block: list[str]) -> Sse | None:
    fields: dict[str, list[str]] = {}
    for line in block:
        name, _, value = line.partition(":")
        fields.setdefault(name, []).append(value.removeprefix(" "))
    if "data" not in fields:
        return None  # a keep-alive comment
    event, event_id = fields.get("event", [None])[0], fields.get("id", [None])[0]
    return Sse(event, event_id, json.loads("\n".join(fields["data"])))


def parse_all(text: str) -> list[Sse]:
    blocks = text.replace("\r\n", "\n").split("\n\n")
    return [e for e in (_parse(b.split("\n")) for b in blocks) if e is not None]


class Reader:
    """The events of a streaming response, one at a time, each within WAIT_S."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def next(self) -> Sse | None:
        return await asyncio.wait_for(self._next(), WAIT_S)

    async def _next(self) -> Sse | None:
        block: list[str] = []
        async for line in self._lines:
            if line:
                block.append(line)
            elif (event := _parse(block)) is not None:
                return event
            else:
                block = []
        return _parse(block)


def report(r: redis.Redis, task_id: str, name: str, data: dict[str, Any]) -> str:
    """A worker's report, as its scripts write it; the entry's id."""
    entry_id = r.xadd(events_key(task_id), {"event": name, "data": json.dumps(data)})
    r.publish(job_channel(task_id), task_id)
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


async def submit(api: Api) -> str:
    response = await api.client.post(
        "/enqueue-task", json={"kind": "short", "duration_s": 5}, headers=KEY
    )
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


async def whole_stream(api: Api, task_id: str, last_event_id: str | None = None) -> httpx.Response:
    headers = {**KEY, **({"Last-Event-ID": last_event_id} if last_event_id else {})}
    return await asyncio.wait_for(
        api.client.get(f"/task-status/stream/{task_id}", headers=headers), WAIT_S
    )


def order(event_id: str | None) -> tuple[int, int]:
    assert event_id is not None
    ms, seq = event_id.split("-")
    return int(ms), int(seq)


async def reported_job(api: Api, worker: Worker, r: redis.Redis) -> tuple[str, list[Sse]]:
    """A job that reported progress and log lines while it ran, then succeeded; its stream."""
    task_id = await submit(api)
    token = worker.lease()
    worker.start(task_id, token)
    r.hset(job_key(task_id), "progress", json.dumps(PROGRESS))
    progress_id = report(r, task_id, "progress", PROGRESS)
    log_id = report(r, task_id, "log", LOG)
    assert worker.succeed(task_id, token)

    events = parse_all((await whole_stream(api, task_id)).text)

    assert [(e.event, e.data.get("status")) for e in events] == [
        (None, "PENDING"),
        (None, "STARTED"),
        ("progress", None),
        ("log", None),
        (None, "SUCCESS"),
    ]
    assert (events[2].id, events[3].id) == (progress_id, log_id)
    return task_id, events


async def test_a_late_stream_replays_the_reports_as_named_events_with_ids(
    api: Api, worker: Worker, r: redis.Redis
) -> None:
    _, events = await reported_job(api, worker, r)

    assert events[2].data == PROGRESS
    assert events[3].data == LOG
    ids = [order(e.id) for e in events]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    # A status after a report carries the latest progress too.
    assert events[4].data["progress"] == PROGRESS


async def test_a_stream_resumes_after_a_report_s_id(
    api: Api, worker: Worker, r: redis.Redis
) -> None:
    task_id, events = await reported_job(api, worker, r)

    after_progress = parse_all((await whole_stream(api, task_id, events[2].id)).text)
    after_log = parse_all((await whole_stream(api, task_id, events[3].id)).text)
    after_all = await whole_stream(api, task_id, events[4].id)

    assert after_progress == events[3:]
    assert after_log == events[4:]
    assert after_all.status_code == 204


async def test_a_stream_opened_before_the_reports_gets_them_live(
    api: Api, worker: Worker, r: redis.Redis
) -> None:
    task_id = await submit(api)

    async with api.stream.stream("GET", f"/task-status/stream/{task_id}", headers=KEY) as resp:
        assert resp.status_code == 200
        events = Reader(resp)
        pending = await events.next()
        assert pending is not None
        assert (pending.event, pending.data["status"]) == (None, "PENDING")
        token = await asyncio.to_thread(worker.lease)
        await asyncio.to_thread(worker.start, task_id, token)
        started = await events.next()
        assert started is not None
        assert started.data["status"] == "STARTED"

        progress_id = await asyncio.to_thread(report, r, task_id, "progress", PROGRESS)
        assert await events.next() == Sse("progress", progress_id, PROGRESS)
        log_id = await asyncio.to_thread(report, r, task_id, "log", LOG)
        assert await events.next() == Sse("log", log_id, LOG)

        assert await asyncio.to_thread(worker.succeed, task_id, token)
        success = await events.next()
        assert success is not None
        assert (success.event, success.data["status"]) == (None, "SUCCESS")
        assert await events.next() is None  # it ended after the terminal status

    assert api.runtime.hub.streams == 0


async def test_reports_of_a_queued_job_do_not_disturb_its_place_in_line(
    api: Api, r: redis.Redis
) -> None:
    """A report while PENDING (none is expected, but the stream must not care) is passed on
    and the stream goes on following the job."""
    task_id = await submit(api)

    async with api.stream.stream("GET", f"/task-status/stream/{task_id}", headers=KEY) as resp:
        events = Reader(resp)
        pending = await events.next()
        assert pending is not None
        assert pending.data["position"] == 0
        log_id = await asyncio.to_thread(report, r, task_id, "log", LOG)
        assert await events.next() == Sse("log", log_id, LOG)

        cancelled = await api.client.delete(f"/tasks/{task_id}", headers=KEY)
        assert cancelled.status_code == 200
        revoked = await events.next()
        assert revoked is not None
        assert (revoked.event, revoked.data["status"]) == (None, "REVOKED")
        assert await events.next() is None


async def test_the_schema_documents_each_kind_of_event(api: Api) -> None:
    schema = (await api.client.get("/openapi.json")).json()
    ok = schema["paths"]["/task-status/stream/{task_id}"]["get"]["responses"]["200"]
    shapes = ok["content"]["text/event-stream"]["schema"]["oneOf"]

    assert [s["properties"]["event"]["const"] for s in shapes] == [
        "message",
        "progress",
        "log",
        "preempted",
        "error",
    ]
    data = [s["properties"]["data"]["contentSchema"] for s in shapes]
    assert data[0] == {"$ref": "#/components/schemas/TaskStatus"}
    assert data[1] == {"$ref": "#/components/schemas/Progress"}
    assert data[2]["properties"]["lines"]["items"] == {"$ref": "#/components/schemas/LogLine"}
    assert "event: progress" in ok["description"]
    assert "event: log" in ok["description"]
    assert "event: preempted" in ok["description"]
    assert set(data[3]["properties"]) == {"preemptions", "seconds", "ran_s"}
    assert {"Progress", "LogLine"} <= set(schema["components"]["schemas"])
