"""Server-sent events as the client reads them (parsed by httpx-sse)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from httpx_sse import EventSource


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event: the stream's last event id (None before the first `id:` line; an
    event without one carries the one before, as the SSE rules say) and its data."""

    id: str | None
    data: str
    event: str = "message"
    retry_ms: int | None = None


def sse_events(source: EventSource) -> Iterator[SseEvent]:
    """The events of an event stream, parsed by httpx-sse; comments (keep-alives) and events
    without data are skipped, and an event the stream ends in the middle of is dropped. Raises
    SSEError, a TransportError, if the answer is not text/event-stream."""
    for event in source.iter_sse():
        if event.data:
            yield SseEvent(event.id or None, event.data, event.event, event.retry)


def server_gave_up(event: SseEvent) -> str:
    """What an `event: error` says, as one line."""
    try:
        detail = json.loads(event.data).get("detail", event.data)
    except (ValueError, AttributeError):
        detail = event.data
    return f"the server ended it: {' '.join(str(detail).split())[:120]}"
