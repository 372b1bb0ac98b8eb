"""GET /task-status/stream/{task_id}: server-sent events of the job's changes, each the status
endpoint's JSON, ending after a terminal status; resumable with Last-Event-ID."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from app.api.live import places
from tests.api.conftest import Api
from tests.api.helpers import (
    KEY,
    NOT_FOUND,
    SECOND_KEY,
    SECOND_KEY_V2,
    UNAUTHORIZED,
    WAIT_S,
    Event,
    EventReader,
    Worker,
    parse_events,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): each test closes its streams,
    which shared_api checks."""
    return shared_api


async def submit(api: Api, key: dict[str, str] = KEY) -> str:
    response = await api.client.post(
        "/enqueue-task", json={"kind": "short", "duration_s": 5}, headers=key
    )
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


async def current(api: Api, task_id: str) -> dict[str, Any]:
    response = await api.client.get(f"/task-status/{task_id}", headers=KEY)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def whole_stream(
    api: Api, task_id: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    """The stream of a job that has ended, read to its end (which must come within WAIT_S)."""
    return await asyncio.wait_for(
        api.client.get(f"/task-status/stream/{task_id}", headers={**KEY, **(headers or {})}),
        WAIT_S,
    )


async def finished_job(api: Api, worker: Worker) -> tuple[str, list[Event]]:
    """A job driven PENDING -> STARTED -> SUCCESS, and its three events."""
    task_id = await submit(api)
    await asyncio.to_thread(worker.run, task_id)
    response = await whole_stream(api, task_id)
    events = parse_events(response.text)
    assert [e.data["status"] for e in events] == ["PENDING", "STARTED", "SUCCESS"]
    return task_id, events


def order(event_id: str | None) -> tuple[int, int]:
    assert event_id is not None
    ms, seq = event_id.split("-")
    return int(ms), int(seq)


# -- a live stream --------------------------------------------------------------------------------
async def test_a_job_driven_to_success_streams_each_change_live_then_ends(
    api: Api, worker: Worker
) -> None:
    task_id = await submit(api)
    url = f"/task-status/stream/{task_id}"

    async with api.stream.stream("GET", url, headers=KEY) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = EventReader(response)

        pending = await events.next()
        assert pending is not None
        assert pending.data == await current(api, task_id)
        assert pending.data["status"] == "PENDING"
        assert pending.data["position"] == 0

        token = await asyncio.to_thread(worker.lease)
        await asyncio.to_thread(worker.start, task_id, token)
        started = await events.next()
        assert started is not None
        assert started.data == await current(api, task_id)
        assert started.data["status"] == "STARTED"

        assert await asyncio.to_thread(worker.succeed, task_id, token)
        success = await events.next()
        assert success is not None
        assert success.data == await current(api, task_id)
        assert success.data["status"] == "SUCCESS"

        assert await events.next() is None  # the stream ended by itself
        assert events.ended

    assert order(pending.id) < order(started.id) < order(success.id)
    assert api.runtime.hub.streams == 0


async def test_a_failed_job_ends_its_stream_with_the_error(api: Api, worker: Worker) -> None:
    task_id = await submit(api)

    async with api.stream.stream("GET", f"/task-status/stream/{task_id}", headers=KEY) as resp:
        events = EventReader(resp)
        assert (await events.next()) is not None
        token = await asyncio.to_thread(worker.lease)
        await asyncio.to_thread(worker.start, task_id, token)
        await asyncio.to_thread(worker.fail, task_id, token, "ValueError: boom")

        started, failure = await events.next(), await events.next()
        assert started is not None and started.data["status"] == "STARTED"
        assert failure is not None and failure.data["status"] == "FAILURE"
        assert failure.data["error"] == "ValueError: boom"
        assert await events.next() is None


async def test_a_client_that_leaves_frees_its_stream(api: Api) -> None:
    task_id = await submit(api)

    async with api.stream.stream("GET", f"/task-status/stream/{task_id}", headers=KEY) as resp:
        assert await EventReader(resp).next() is not None
        assert api.runtime.hub.streams == 1

    assert api.runtime.hub.streams == 0


async def test_a_queued_jobs_stream_tells_its_new_place_when_the_queue_moves(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The places are read again at most once a PACE_S (1 s): a pace this test need not wait out.
    monkeypatch.setattr(places, "PACE_S", 0.05)
    ahead, task_id = await submit(api), await submit(api)

    async with api.stream.stream("GET", f"/task-status/stream/{task_id}", headers=KEY) as resp:
        events = EventReader(resp)
        first = await events.next()
        assert first is not None and first.data["position"] == 1

        cancelled = await api.client.delete(f"/tasks/{ahead}", headers=KEY)
        assert cancelled.status_code == 200, cancelled.text
        moved = await events.next()

    assert moved is not None
    assert moved.data["status"] == "PENDING"
    assert moved.data["position"] == 0
    assert moved.data == await current(api, task_id)
    # Not an event of the job's own history: a client resuming with Last-Event-ID resumes
    # after the last real change, which it has seen.
    assert moved.id is None


# -- a finished job, and resuming -----------------------------------------------------------------
async def test_a_finished_jobs_stream_replays_every_change_and_ends(
    api: Api, worker: Worker
) -> None:
    task_id, events = await finished_job(api, worker)

    assert all(e.id for e in events)
    assert len({e.id for e in events}) == 3
    assert events[-1].data == await current(api, task_id)
    assert events[0].data["task_id"] == task_id


async def test_last_event_id_replays_only_the_later_events(api: Api, worker: Worker) -> None:
    task_id, events = await finished_job(api, worker)

    response = await whole_stream(api, task_id, {"Last-Event-ID": events[0].id or ""})

    assert response.status_code == 200
    assert parse_events(response.text) == events[1:]


GARBAGE_IDS = {
    "word": "garbage",
    "empty": "",
    "negative": "-1",
    "three-parts": "1-2-3",
    "hex": "0x10-1",
    "over-64-bits": "99999999999999999999-0",  # the pattern's 20 digits, but no stream id
}


@pytest.mark.parametrize("last_event_id", GARBAGE_IDS.values(), ids=GARBAGE_IDS.keys())
async def test_a_garbage_last_event_id_replays_from_the_start(
    api: Api, worker: Worker, last_event_id: str
) -> None:
    task_id, events = await finished_job(api, worker)

    response = await whole_stream(api, task_id, {"Last-Event-ID": last_event_id})

    assert response.status_code == 200
    assert parse_events(response.text) == events


async def test_reconnecting_after_the_terminal_event_ends_at_once(api: Api, worker: Worker) -> None:
    """An EventSource reconnects by itself when a stream ends, with the id of the last event it
    got; the job has ended, so the answer must end too rather than wait forever."""
    task_id, events = await finished_job(api, worker)
    url = f"/task-status/stream/{task_id}"
    headers = {**KEY, "Last-Event-ID": events[-1].id or ""}

    async with api.stream.stream("GET", url, headers=headers) as response:
        assert response.status_code in (200, 204)  # 204 also stops an EventSource reconnecting
        assert await EventReader(response).next(timeout=2) is None


# -- refusals -------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", [SECOND_KEY, SECOND_KEY_V2], ids=["second", "second-v2"])
async def test_another_accounts_stream_is_a_json_404_before_any_event(
    api: Api, key: dict[str, str]
) -> None:
    task_id = await submit(api)

    for target in (task_id, str(uuid.uuid4()), "not-a-uuid"):
        response = await api.client.get(f"/task-status/stream/{target}", headers=key)
        assert response.status_code == 404
        assert response.headers["content-type"] == "application/json"
        assert response.json() == NOT_FOUND
    assert api.runtime.hub.streams == 0


async def test_a_stream_needs_a_key(api: Api) -> None:
    task_id = await submit(api)

    response = await api.client.get(f"/task-status/stream/{task_id}")

    assert response.status_code == 401
    assert response.json() == UNAUTHORIZED
    assert response.headers["www-authenticate"] == "ApiKey"
