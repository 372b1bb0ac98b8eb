"""app.client on its own: the event-stream parser, reconnecting with Last-Event-ID, and one-line
errors for answers that a live server gives only by accident (a proxy's HTML, a broken stream).
The commands against the real API are in test_client_cli.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx
import pytest
from httpx_sse import EventSource

from app.client.http import Client, LogBatch
from app.client.sse import SseEvent, sse_events
from app.client.transport import RequestError, check_url, describe_detail
from app.models import LogLine, Progress, Status, TaskStatus

TASK = "0b7d2f6e-0000-4000-8000-000000000001"
URL = "http://fairgpu.test"


def state(status: str, **extra: object) -> str:
    return json.dumps({"task_id": TASK, "status": status, "kind": "short", "attempts": 1, **extra})


def event(data: str, event_id: str | None = None, name: str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    head += f"event: {name}\n" if name is not None else ""
    return f"{head}data: {data}\n\n".encode()


class Breaks(httpx.SyncByteStream):
    """A body that sends its chunks, then fails as a reset connection does."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        raise httpx.ReadError("connection reset by peer")


def client(handler: Callable[[httpx.Request], httpx.Response], **options: object) -> Client:
    return Client(URL, "k", transport=httpx.MockTransport(handler), **options)  # type: ignore[arg-type]


def sse(stream: httpx.SyncByteStream | bytes) -> httpx.Response:
    headers = {"content-type": "text/event-stream"}
    if isinstance(stream, bytes):
        return httpx.Response(200, headers=headers, content=stream)
    return httpx.Response(200, headers=headers, stream=stream)


# -- the parser -----------------------------------------------------------------------------------
def test_events_are_split_on_blank_lines_with_their_ids_and_comments_skipped() -> None:
    lines = [
        ": ping",
        "id: 1-0",
        "data: {}",
        "",
        "data: first",
        "data:second",
        "",
        "event: nothing",
        "",
        "id: 2-0",
        "data: cut off",
    ]
    events = list(sse_events(EventSource(sse("\n".join(lines).encode()))))
    # The second event has no id line: it carries the stream's last event id, as the SSE rules
    # (and httpx-sse) say, which is the id to resume after.
    assert events == [SseEvent("1-0", "{}"), SseEvent("1-0", "first\nsecond")]


def test_a_stream_that_is_not_an_event_stream_is_one_line() -> None:
    page = httpx.Response(200, text="<html>\nwelcome</html>")
    with (
        client(lambda request: page) as c,
        pytest.raises(RequestError, match=r"is http://fairgpu\.test a fairgpu server"),
    ):
        next(c.watch(TASK))


def test_a_validation_error_list_reads_as_one_line() -> None:
    detail = [
        {"type": "greater_than", "loc": ["body", "duration_s"], "msg": "Input should be > 0"},
        {"type": "missing", "loc": ["query", "limit"], "msg": "Field\nrequired"},
    ]
    assert describe_detail(detail) == "duration_s: Input should be > 0; query.limit: Field required"


def test_a_url_that_is_not_http_is_refused_before_any_request() -> None:
    assert check_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000"
    for bad in ("ftp://host", "127.0.0.1:8000", "http://"):
        with pytest.raises(ValueError, match="invalid server URL"):
            check_url(bad)
    with pytest.raises(ValueError, match="printable ASCII"):
        Client(URL, "kéy")


# -- the event stream -----------------------------------------------------------------------------
def test_a_stream_that_breaks_is_resumed_after_its_last_event_id() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Last-Event-ID"))
        if len(seen) == 1:
            pending = event(state("PENDING", position=1), "1-0") + event(state("PENDING"))
            return sse(Breaks([pending]))
        if len(seen) == 2:
            return sse(Breaks([b": keep-alive\n\n"]))  # dropped again before any event
        return sse(event(state("STARTED"), "2-0") + event(state("SUCCESS"), "3-0"))

    with client(handler, reconnect_delay_s=0) as c:
        statuses = [s.status for s in c.watch(TASK)]
    assert statuses == [Status.PENDING, Status.PENDING, Status.STARTED, Status.SUCCESS]
    # The event without an id (a new place in line) does not move the resume point.
    assert seen == [None, "1-0", "1-0"]


def test_a_stream_the_server_ends_early_is_resumed_too() -> None:
    calls = iter([event(state("PENDING"), "1-0"), event(state("FAILURE", error="boom"), "2-0")])
    with client(lambda request: sse(next(calls)), reconnect_delay_s=0) as c:
        assert [s.status for s in c.watch(TASK)] == [Status.PENDING, Status.FAILURE]


def test_reconnecting_is_bounded_and_ends_in_one_line() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if "Last-Event-ID" not in request.headers:
            return sse(Breaks([event(state("PENDING"), "1-0")]))
        raise httpx.ConnectError("[Errno 111] Connection refused")

    with client(handler, reconnects=2, reconnect_delay_s=0) as c:
        updates = c.watch(TASK)
        assert next(updates).status is Status.PENDING
        with pytest.raises(RequestError) as caught:
            next(updates)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"the event stream from {URL} kept dropping")
    assert "gave up after 2 reconnects" in message


def test_a_204_on_resuming_ends_the_watch_with_the_current_status() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/task-status/stream/"):
            if "Last-Event-ID" in request.headers:
                return httpx.Response(204)
            return sse(Breaks([event(state("STARTED"), "1-0")]))
        return httpx.Response(200, content=state("SUCCESS"))

    with client(handler, reconnect_delay_s=0) as c:
        assert [s.status for s in c.watch(TASK)] == [Status.STARTED, Status.SUCCESS]


def test_an_unreachable_server_at_the_start_is_an_error_at_once() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    with client(handler) as c, pytest.raises(RequestError) as caught:
        next(c.watch(TASK))
    assert str(caught.value) == f"cannot reach {URL}: connection refused"


def test_an_event_that_is_not_a_status_is_one_line() -> None:
    body = b"id: 1-0\ndata: <html>\ndata: </html>\n\n"
    with (
        client(lambda request: sse(body)) as c,
        pytest.raises(RequestError, match=f"^unexpected event from {URL}: <html> </html>$"),
    ):
        next(c.watch(TASK))


def test_named_events_are_a_jobs_progress_and_log_lines_and_unknown_ones_are_skipped() -> None:
    line = {"at": 1.5, "stream": "stderr", "text": "careful"}
    log = json.dumps({"lines": [line], "dropped": 2})
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Last-Event-ID"))
        if seen[-1] is None:
            body = event(state("STARTED"), "1-0") + event('{"fraction": 0.5}', "2-0", "progress")
            return sse(Breaks([body + event("{}", "3-0", "from-a-newer-server")]))
        return sse(event(log, "4-0", "log") + event(state("SUCCESS"), "5-0"))

    with client(handler, reconnect_delay_s=0) as c:
        events = list(c.events(TASK))
        assert [s.status for s in c.watch(TASK)] == [Status.STARTED, Status.SUCCESS]
    assert seen == [None, "3-0"] * 2  # an event it skipped still moves the resume point
    assert [type(e) for e in events] == [TaskStatus, Progress, LogBatch, TaskStatus]
    assert events[1] == Progress(fraction=0.5, message=None)
    said = LogLine(at=1.5, stream="stderr", text="careful")
    assert events[2] == LogBatch(lines=[said], dropped=2)


# -- answers --------------------------------------------------------------------------------------
def test_429_says_when_to_retry() -> None:
    detail = {"detail": "more than 100 requests a second with this key"}
    with (
        client(lambda r: httpx.Response(429, json=detail, headers={"Retry-After": "1"})) as c,
        pytest.raises(RequestError) as caught,
    ):
        c.status(TASK)
    assert caught.value.status == 429
    assert str(caught.value) == (
        f"429 more than 100 requests a second with this key at {URL}/task-status/{TASK}; "
        "retry after 1 s"
    )


def test_an_error_page_that_is_not_json_gives_its_reason() -> None:
    with (
        client(lambda r: httpx.Response(502, text="<html>\nbad gateway</html>")) as c,
        pytest.raises(RequestError, match=f"^502 Bad Gateway at {URL}/billing-records$"),
    ):
        c.billing()


def test_a_success_that_is_not_the_api_is_one_line() -> None:
    with (
        client(lambda r: httpx.Response(200, text="<html>welcome</html>")) as c,
        pytest.raises(RequestError, match=r"is http://fairgpu\.test a fairgpu server"),
    ):
        c.account()


def test_a_task_id_cannot_reach_another_path() -> None:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.raw_path.decode())
        return httpx.Response(404, json={"detail": "task not found"})

    with client(handler) as c, pytest.raises(RequestError):
        c.status("../admin/queues?x=1")
    assert paths == ["/task-status/..%2Fadmin%2Fqueues%3Fx%3D1"]


def test_all_tasks_stops_on_a_repeated_cursor() -> None:
    page = {"tasks": [json.loads(state("SUCCESS"))], "next_cursor": "same"}
    with (
        client(lambda r: httpx.Response(200, json=page)) as c,
        pytest.raises(RequestError, match="same cursor twice"),
    ):
        list(c.all_tasks())


def test_an_admin_404_from_a_server_without_the_admin_api_says_so() -> None:
    month = {
        "month": "2026-12", "billed_seconds": 0, "cost": 0, "cost_micros": 0, "held_seconds": 0,
        "held_cost": 0, "budget_gpu_seconds": None, "budget_cost": None,
        "left_gpu_seconds": None, "left_cost": None,
    }  # fmt: skip
    account = {"user_id": "u1", "description": "", "share": 1, "admin": True, "max_queued": 10,
               "month": month}  # fmt: skip

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/account":
            return httpx.Response(200, json=account)
        return httpx.Response(404, json={"detail": "Not Found"})

    with client(handler) as c, pytest.raises(RequestError) as caught:
        c.queues()
    assert str(caught.value) == f"404 at {URL}/admin/queues: this server has no admin API"


def test_an_error_event_from_the_server_is_a_reconnect_after_its_last_event_id() -> None:
    seen: list[str | None] = []
    gave_up = b'event: error\nretry: 1\ndata: {"detail": "Redis is unreachable"}\n\n'

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Last-Event-ID"))
        if len(seen) == 1:
            return sse(event(state("PENDING"), "1-0") + gave_up)
        return sse(event(state("SUCCESS"), "2-0"))

    with client(handler, reconnect_delay_s=0) as c:
        assert [s.status for s in c.watch(TASK)] == [Status.PENDING, Status.SUCCESS]
    assert seen == [None, "1-0"]


def test_a_server_that_keeps_giving_up_ends_in_one_line_naming_why() -> None:
    gave_up = b'event: error\nretry: 1\ndata: {"detail": "Redis is unreachable"}\n\n'
    expected = "the server ended it: Redis is unreachable"
    with (
        client(lambda request: sse(gave_up), reconnects=1, reconnect_delay_s=0) as c,
        pytest.raises(RequestError, match=expected),
    ):
        list(c.watch(TASK))
