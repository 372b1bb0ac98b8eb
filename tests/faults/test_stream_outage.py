"""An open event stream across a Redis outage: it rides out a short one and goes on to the job's
end, and past SSE_OUTAGE_S it ends with `event: error` and a `retry:` field; never a silent end."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.faults.conftest import DEMO_KEY, Faults, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]


class StreamRecorder:
    """Reads one event stream in a thread and keeps its raw lines; `ended` is set when the
    server closes it (cleanly or not)."""

    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key
        self.lines: list[str] = []
        self.status = 0
        self.broken: str | None = None  # how the connection broke, if it did not end cleanly
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._read, name="stream", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        timeout, headers = httpx.Timeout(10, read=60), {"X-API-Key": self.key}
        try:
            with httpx.stream("GET", self.url, headers=headers, timeout=timeout) as r:
                self.status = r.status_code
                for line in r.iter_lines():
                    self.lines.append(line)
        except httpx.HTTPError as exc:
            self.broken = repr(exc)
        finally:
            self.ended.set()

    def events(self) -> list[dict[str, str]]:
        """The events received so far, each as its fields (comments left out)."""
        events, fields = [], {}
        for line in list(self.lines):
            if not line:
                if fields:
                    events.append(fields)
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
        return events

    def statuses(self) -> list[str]:
        """The status of each data event that holds one."""
        found = []
        for event in self.events():
            data = json.loads(event.get("data", "{}"))
            if "status" in data:
                found.append(data["status"])
        return found

    def comments(self) -> int:
        """Keep-alive comments received so far."""
        return sum(line.startswith(":") for line in list(self.lines))

    def close(self) -> None:
        """Wait briefly for the reader thread (it ends with the stream or the test's stack)."""
        self._thread.join(timeout=5)


def open_stream(faults: Faults) -> tuple[str, StreamRecorder]:
    """A queued job (no worker runs yet) and a stream following it, past its first event."""
    task_id = faults.submit(DEMO_KEY, duration_s=0.3)
    stream = StreamRecorder(f"{faults.stack.url}/task-status/stream/{task_id}", DEMO_KEY)
    wait_for(lambda: stream.statuses() == ["PENDING"], timeout=20, what="the first event")
    return task_id, stream


def test_a_stream_rides_out_a_redis_restart_and_delivers_the_job_s_end(
    make_faults: Callable[..., Faults],
) -> None:
    faults = make_faults(workers=0, sse_keepalive_s=0.5)
    task_id, stream = open_stream(faults)

    faults.redis_server.kill()
    wait_for(lambda: faults.health() == 503, timeout=20, what="/health to say Redis is down")
    pinged = stream.comments()
    # While Redis is away the stream stays open and keeps sending keep-alive comments.
    wait_for(lambda: stream.comments() > pinged, timeout=20, what="a keep-alive during the outage")
    assert not stream.ended.is_set(), stream.lines
    faults.redis_server.start()
    wait_for(lambda: faults.health() == 200, timeout=20, what="/health 200 again")

    faults.stack.start_worker("cpu1")  # now the job runs, and its changes reach the same stream
    assert stream.ended.wait(60), f"the stream did not end: {stream.lines}"
    stream.close()
    assert (stream.status, stream.broken) == (200, None)
    statuses = stream.statuses()
    assert statuses[0] == "PENDING" and statuses[-1] == "SUCCESS", stream.lines
    assert not [e for e in stream.events() if e.get("event") == "error"], stream.lines
    assert faults.status(DEMO_KEY, task_id)["status"] == "SUCCESS"


def test_a_stream_ends_with_an_error_event_and_a_retry_when_redis_stays_away(
    make_faults: Callable[..., Faults],
) -> None:
    faults = make_faults(workers=0, sse_outage_s=1.0)
    _, stream = open_stream(faults)

    faults.redis_server.kill()  # and it stays down
    assert stream.ended.wait(30), f"the stream neither ended nor said why: {stream.lines}"
    stream.close()
    assert (stream.status, stream.broken) == (200, None)
    last: dict[str, Any] = stream.events()[-1]
    assert last.get("event") == "error", stream.lines
    assert int(last["retry"]) > 0  # milliseconds before a plain EventSource reconnects
    assert "id" not in last  # Last-Event-ID stays the last real event's, so nothing is missed
    assert json.loads(last["data"])["detail"]
    assert stream.statuses() == ["PENDING"]
