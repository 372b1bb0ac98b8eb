"""The baseline API: the same server stack as fairgpu's (FastAPI, uvicorn as app/serve.py runs
it, sse-starlette) with endpoints that touch no Redis.

- POST /enqueue-task validates the same body (app.models.EnqueueRequest) and answers the same
  response model with a fresh id;
- GET /stream/{n} sends one event, then a second when POST /poke/{n} arrives, and ends.

Run as `python -m scripts.benchkit.overhead.trivial_api` with PORT set.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.models import EnqueueRequest, EnqueueResponse

app = FastAPI(title="baseline")
waiting: dict[str, asyncio.Event] = {}


@app.post("/enqueue-task", response_model=EnqueueResponse)
async def enqueue_task(body: EnqueueRequest) -> EnqueueResponse:
    """Validate the job and answer as fairgpu does, without queueing anything."""
    return EnqueueResponse(task_id=str(uuid.uuid4()))


async def _events(n: str) -> AsyncIterator[ServerSentEvent]:
    event = waiting.setdefault(n, asyncio.Event())
    try:
        yield ServerSentEvent(data='{"status": "PENDING"}', id="1")
        await event.wait()
        yield ServerSentEvent(data='{"status": "REVOKED"}', id="2")
    finally:
        waiting.pop(n, None)


@app.get("/stream/{n}")
async def stream(n: str) -> EventSourceResponse:
    """One event now, one more when poked."""
    return EventSourceResponse(_events(n), ping=15)


@app.post("/poke/{n}")
async def poke(n: str) -> dict[str, bool]:
    """Wake stream n."""
    event = waiting.get(n)
    if event is not None:
        event.set()
    return {"poked": event is not None}


def main() -> None:
    """Serve on 127.0.0.1:PORT as fairgpu's API is served."""
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="info")


if __name__ == "__main__":
    main()
