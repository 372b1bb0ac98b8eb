"""An open event stream ends when its key is revoked or its account disabled, with an `event:
error` that says so; streams on the account's other keys go on while only a key is revoked.
The change may come through another API process (another app), heard through Redis."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.api.routes.stream import REVOKED
from app.auth import digest
from app.settings import Settings
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, SECOND, SECOND_KEY, SECOND_KEY_V2, WAIT_S

pytestmark = pytest.mark.anyio


class Events:
    """The events of an open stream, each as (its name, its data), read one at a time."""

    def __init__(self, response: httpx.Response) -> None:
        assert response.status_code == 200, response.status_code
        self._lines = response.aiter_lines()

    async def next(self) -> tuple[str, dict[str, Any]] | None:
        """The next event (within WAIT_S), or None once the stream has ended."""
        return await asyncio.wait_for(self._next(), WAIT_S)

    async def _next(self) -> tuple[str, dict[str, Any]] | None:
        name, data = "message", []
        async for line in self._lines:
            if line.startswith("event:"):
                name = line.partition(":")[2].strip()
            elif line.startswith("data:"):
                data.append(line.partition(":")[2].strip())
            elif not line and data:
                return name, json.loads("\n".join(data))
        return None


@contextlib.asynccontextmanager
async def stream(api: Api, task_id: str, key: dict[str, str]) -> AsyncIterator[Events]:
    """The job's stream with this key, its first event (the job queued) read already."""
    async with api.stream.stream("GET", f"/task-status/stream/{task_id}", headers=key) as resp:
        events = Events(resp)
        first = await events.next()
        assert first is not None and first[1]["status"] == "PENDING"
        yield events


async def submit(api: Api, key: dict[str, str]) -> str:
    body = {"kind": "short", "duration_s": 5}
    response = await api.client.post("/enqueue-task", json=body, headers=key)
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


async def admin(api: Api, method: str, path: str, **kwargs: Any) -> None:
    response = await api.client.request(method, f"/admin{path}", headers=KEY, **kwargs)
    assert response.status_code == 200, response.text


async def ends_revoked(events: Events) -> None:
    """The stream's next event is the error that says why it ends, and then it ends."""
    assert await events.next() == ("error", {"detail": REVOKED})
    assert await events.next() is None


async def test_a_revoked_keys_stream_ends_and_the_accounts_other_key_streams_on(api: Api) -> None:
    task_id = await submit(api, SECOND_KEY)
    async with stream(api, task_id, SECOND_KEY) as revoked, stream(api, task_id, SECOND_KEY_V2):
        assert api.runtime.hub.streams == 2
        await admin(api, "DELETE", f"/keys/{digest(SECOND_KEY['X-API-Key'])[:16]}")
        await ends_revoked(revoked)
        assert api.runtime.hub.streams == 1  # the other key's stream is still open


async def test_a_disabled_accounts_streams_end(api: Api) -> None:
    task_id = await submit(api, SECOND_KEY)
    async with (
        stream(api, task_id, SECOND_KEY) as first,
        stream(api, task_id, SECOND_KEY_V2) as other,
    ):
        await admin(api, "PATCH", f"/accounts/{SECOND}", json={"disabled": True})
        await ends_revoked(first)
        await ends_revoked(other)
    assert api.runtime.hub.streams == 0


async def test_a_key_revoked_through_another_api_process_ends_the_stream(
    settings: Settings,
) -> None:
    """Two apps, as two API processes: the one serving the stream hears of the revocation
    only through Redis."""
    async with open_api(settings) as first, open_api(settings) as second:
        task_id = await submit(second, SECOND_KEY)
        async with stream(second, task_id, SECOND_KEY) as events:
            await admin(first, "DELETE", f"/keys/{digest(SECOND_KEY['X-API-Key'])[:16]}")
            await ends_revoked(events)
