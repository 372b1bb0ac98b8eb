"""Hostile input, written by hand: odd API keys, task ids built to reach Redis, bodies built to
break the parser, and garbage resume ids. Each must get a 4xx with a JSON `detail`, quickly, and
change nothing in Redis; the key and malformed-id cases must not send Redis a single command."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis

from app.api.routes import code
from app.auth import Account
from tests.api.conftest import Api
from tests.api.helpers import (
    KEY,
    UNAUTHORIZED,
    WAIT_S,
    Untouched,
    Worker,
    contents,
    parse_events,
    schema_app,
)

pytestmark = pytest.mark.anyio

JOB = {"kind": "short", "duration_s": 5}
JSON_TYPE = "application/json"
JSON = {"content-type": JSON_TYPE}
LIMIT = 64 * 1024
#: A request that is served counts against its key's rate, in a counter that expires by itself:
#: the one write that reading a job may make.
RATE_COUNTERS = b"fairgpu:rate:"


def stored(r: redis.Redis) -> dict[bytes, bytes | None]:
    """Everything in Redis but the rate counters."""
    return {k: v for k, v in contents(r).items() if not k.startswith(RATE_COUNTERS)}


def keyed_operations() -> list[tuple[str, str]]:
    """Every (method, path) the OpenAPI schema says needs the API key: all but /health and
    /metrics, less the /admin ones, which answer a bad key 404 (tests/api/test_admin.py)."""
    schema = schema_app().openapi()
    found = [
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if operation.get("security") and not path.startswith("/admin/")
    ]
    assert found, "the schema declares no keyed operation"
    return sorted(found)


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): what they send is refused before
    it reaches anything a runtime keeps, or only submits and reads jobs in Redis."""
    return shared_api


KEYED = keyed_operations()
TASK_ID_OPERATIONS = [(method, path) for method, path in KEYED if "{task_id}" in path]


async def send(
    api: Api, method: str, path: str, task_id: str, headers: Any = None
) -> httpx.Response:
    """One request to an operation, with a valid body where it takes one; `headers` may be raw
    (name, value) byte pairs, so that values httpx would refuse as text can be sent."""
    body = json.dumps(JOB).encode() if method == "POST" else None
    request = api.client.build_request(
        method, path.replace("{task_id}", task_id), content=body, headers=headers
    )
    if body is not None:
        request.headers["content-type"] = JSON_TYPE
    return await asyncio.wait_for(api.client.send(request), WAIT_S)


async def submit(api: Api) -> str:
    response = await api.client.post("/enqueue-task", json=JOB, headers=KEY)
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


def assert_json_detail(response: httpx.Response, *statuses: int) -> Any:
    assert response.status_code in statuses, (response.status_code, response.text[:300])
    assert response.headers["content-type"] == "application/json"
    detail = response.json()["detail"]
    assert detail
    return detail


# -- API keys -------------------------------------------------------------------------------------
@dataclass
class Lookups:
    """Every key the app looked up, and what the lookup returned."""

    calls: list[tuple[str | None, Account | None]]


@pytest.fixture
def lookups(api: Api, monkeypatch: pytest.MonkeyPatch) -> Lookups:
    accounts = api.runtime.accounts
    authenticate = accounts.authenticate
    seen = Lookups([])

    def recording(key: str | None) -> Account | None:
        account = authenticate(key)
        seen.calls.append((key, account))
        return account

    monkeypatch.setattr(accounts, "authenticate", recording)
    return seen


DIGEST = hashlib.sha256(b"default_api_key").hexdigest()
#: Header lists; raw bytes where the value is not ASCII. None: no X-API-Key header at all.
BAD_KEYS: dict[str, list[tuple[bytes, bytes]] | None] = {
    "absent": None,
    "empty": [(b"x-api-key", b"")],
    "wrong": [(b"x-api-key", b"wrong_key")],
    "long-100kb": [(b"x-api-key", b"k" * 100_000)],
    "long-valid-prefix": [(b"x-api-key", b"default_api_key" + b"x" * 100_000)],
    "utf8-bytes": [(b"x-api-key", "default_api_kéy".encode())],
    "latin1-bytes": [(b"x-api-key", "default_api_kéy".encode("latin-1"))],
    "invalid-utf8": [(b"x-api-key", b"\xff\xfe\xfd")],
    "leading-space": [(b"x-api-key", b" default_api_key")],
    "trailing-space": [(b"x-api-key", b"default_api_key ")],
    "surrounding-spaces": [(b"x-api-key", b"  default_api_key  ")],
    "tab": [(b"x-api-key", b"\tdefault_api_key")],
    "upper-case": [(b"x-api-key", b"DEFAULT_API_KEY")],
    "nul-inside": [(b"x-api-key", b"default_api_key\x00")],
    # The accounts file may hold digests: a digest is not a key, with or without its prefix.
    "stored-digest": [(b"x-api-key", f"sha256:{DIGEST}".encode())],
    "bare-digest": [(b"x-api-key", DIGEST.encode())],
    # A good key in the wrong place is no key.
    "bearer-header": [(b"authorization", b"Bearer default_api_key")],
    "other-header": [(b"api-key", b"default_api_key")],
}


@pytest.mark.parametrize("headers", BAD_KEYS.values(), ids=BAD_KEYS.keys())
async def test_a_bad_key_is_the_plain_401_and_sends_redis_nothing(
    api: Api,
    r: redis.Redis,
    lookups: Lookups,
    subtests: pytest.Subtests,
    headers: list[tuple[bytes, bytes]] | None,
) -> None:
    """On every keyed operation, one subtest each (one app for them all: the answers are what
    is under test, and a refused request changes nothing of it)."""
    task_id = await submit(api)  # an owned job, so only the key stands between caller and 200
    for method, path in KEYED:
        with subtests.test(f"{method} {path}"):
            lookups.calls.clear()
            plain = await send(api, method, path, task_id, [(b"x-api-key", b"wrong_key")])
            plain_lookups = len(lookups.calls)
            lookups.calls.clear()

            with Untouched(r):
                response = await send(api, method, path, task_id, headers)
                assert response.status_code == 401, response.text[:300]

            assert response.json() == UNAUTHORIZED
            assert response.headers["www-authenticate"] == "ApiKey"
            # The same answer, byte for byte, as a plain wrong key...
            assert response.headers.multi_items() == plain.headers.multi_items()
            assert response.content == plain.content
            # ...by the same path: as many lookups by digest, none of which found an account.
            assert len(lookups.calls) == plain_lookups >= 1
            assert all(account is None for _, account in lookups.calls)


@pytest.mark.parametrize(("method", "path"), KEYED, ids=[f"{m} {p}" for m, p in KEYED])
async def test_the_same_request_with_the_valid_key_is_not_refused(
    api: Api, method: str, path: str
) -> None:
    """The control for the 401s above: with the right key, each request gets past the key."""
    task_id = await submit(api)
    url = path.replace("{task_id}", task_id)

    if "stream" in path:  # the job is queued, so its stream stays open: read only its head
        async with api.stream.stream(method, url, headers=KEY) as response:
            assert response.status_code == 200
        return
    response = await send(api, method, path, task_id, KEY)

    if "{name}" in path:  # the job left no artifact: past the key, the artifact's own 404
        assert response.json() == {"detail": "artifact not found"}
        return
    if path.startswith("/code"):  # past the key: no such code, or the body is not a .tar.gz
        assert response.status_code in {404, 415}, response.text[:300]
        assert response.json()["detail"] == code.NO_CODE or "tar.gz" in response.json()["detail"]
        return
    assert response.status_code < 300, response.text[:300]


# -- task ids -------------------------------------------------------------------------------------
SAMPLE = "0b7d2f4e-8a51-4c3e-9f6a-1d2e3f4a5b6c"
#: Path segments as they go on the wire (already percent-encoded where they need to be).
BAD_TASK_IDS = {
    "not-a-uuid": "not-a-uuid",
    "upper-case-uuid": SAMPLE.upper(),
    "uuid-without-hyphens": SAMPLE.replace("-", ""),
    "uuid-in-braces": "%7B" + SAMPLE + "%7D",
    "urn-uuid": "urn:uuid:" + SAMPLE,
    "uuid-with-space": "%20" + SAMPLE,
    "uuid-plus-suffix": SAMPLE + "0",
    "fullwidth-digits": "%EF%BC%90" + SAMPLE[1:],
    "huge-10kb": "a" * 10_240,
    "huge-uuids": SAMPLE * 300,
    "glob-star": "*",
    "glob-question": "%3F%3F%3F%3F%3F%3F%3F%3F-%3F%3F%3F%3F-%3F%3F%3F%3F-%3F%3F%3F%3F-%3F%3F%3F%3F",
    "glob-class": "[a-z]",
    "glob-uuid-shape": "*-*-*-*-*",
    "redis-key": "fairgpu:job:*",
    "traversal": "..%2F..%2Fbilling-records",
    "traversal-dots": "..",
    "traversal-encoded-dots": "%2E%2E%2F%2E%2E%2Fhealth",
    "percent-junk": "%ff%fe%00",
    "percent-crlf": "%0D%0ASet-Cookie:%20x=1",
    "percent-nul": SAMPLE[:-1] + "%00",
    "double-encoded": "%252A",
    "lua-quote": "%27%22%5D%5D--",
}


@pytest.mark.parametrize(
    ("method", "path"), TASK_ID_OPERATIONS, ids=[f"{m} {p}" for m, p in TASK_ID_OPERATIONS]
)
async def test_a_malformed_task_id_is_404_before_redis(
    api: Api, r: redis.Redis, subtests: pytest.Subtests, method: str, path: str
) -> None:
    """Each malformed id is a subtest of its own."""
    await submit(api)  # something in Redis that a stray write would change

    for name, task_id in BAD_TASK_IDS.items():
        with subtests.test(name), Untouched(r):
            response = await send(api, method, path, task_id, KEY)
            assert_json_detail(response, 404)


@pytest.mark.parametrize(
    ("method", "path"), TASK_ID_OPERATIONS, ids=[f"{m} {p}" for m, p in TASK_ID_OPERATIONS]
)
async def test_a_malformed_task_id_without_a_key_is_401_not_404(
    api: Api, r: redis.Redis, method: str, path: str
) -> None:
    """The key comes first, as on POST /enqueue-task, where an invalid body without a key is a
    401: a caller without a key learns nothing from the shape of the id it sent."""
    with Untouched(r):
        response = await send(api, method, path, "not-a-uuid")
        assert response.status_code == 401, response.text

    assert response.json() == UNAUTHORIZED


async def test_an_unparsable_body_without_a_key_is_401_not_422(api: Api, r: redis.Redis) -> None:
    """As above, for a body that is not JSON at all (one that is JSON but invalid is a 401)."""
    with Untouched(r):
        response = await api.client.post("/enqueue-task", content=b"\x00", headers=JSON)
        assert response.status_code == 401, response.text

    assert response.json() == UNAUTHORIZED


# -- bodies ---------------------------------------------------------------------------------------
def nested(depth: int, open_: str = "[", close: str = "]") -> bytes:
    return (open_ * depth + close * depth).encode()


VALID = json.dumps(JOB).encode()
#: (body, content type or None for no header); every one must be a 413 or a 422.
BAD_BODIES: dict[str, tuple[bytes, str | None]] = {
    "nested-arrays-10000": (nested(10_000), JSON_TYPE),
    "nested-objects-10000": (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, JSON_TYPE),
    "nested-in-a-field": (
        b'{"kind": "short", "duration_s": 5, "x": ' + nested(10_000) + b"}",
        JSON_TYPE,
    ),
    "nested-unclosed-30000": (b"[" * 30_000, JSON_TYPE),
    "huge-1mib": (b'{"kind": "short", "duration_s": 5, "x": "' + b"y" * 2**20 + b'"}', None),
    "huge-whitespace": (VALID + b" " * LIMIT, JSON_TYPE),
    "not-json": (b"kind=short&duration_s=5", JSON_TYPE),
    "xml": (b"<job><kind>short</kind></job>", JSON_TYPE),
    "binary-garbage": (bytes(range(256)), JSON_TYPE),
    "invalid-utf8-in-string": (b'{"kind": "short\xff", "duration_s": 5}', JSON_TYPE),
    "utf16": ('{"kind": "short", "duration_s": 5}'.encode("utf-16"), JSON_TYPE),
    "utf8-bom": (b"\xef\xbb\xbf" + VALID, JSON_TYPE),
    "duplicate-keys": (b'{"kind": "long", "duration_s": 5, "kind": "short"}', JSON_TYPE),
    "duplicate-duration": (
        b'{"kind": "short", "duration_s": 5, "duration_s": 6}',
        JSON_TYPE,
    ),
    "integer-5000-digits": (
        b'{"kind": "short", "duration_s": 1' + b"0" * 5000 + b"}",
        JSON_TYPE,
    ),
    "exponent-overflow": (b'{"kind": "short", "duration_s": 1e999999}', JSON_TYPE),
    "text-plain": (VALID, "text/plain"),
    "form-encoded": (b"kind=short&duration_s=5", "application/x-www-form-urlencoded"),
    "form-with-json": (VALID, "application/x-www-form-urlencoded"),
    "multipart": (
        b'--b\r\nContent-Disposition: form-data; name="kind"\r\n\r\nshort\r\n--b--\r\n',
        "multipart/form-data; boundary=b",
    ),
    "no-content-type": (VALID, None),
    "empty": (b"", JSON_TYPE),
}


@pytest.mark.parametrize(("body", "content_type"), BAD_BODIES.values(), ids=BAD_BODIES.keys())
async def test_a_hostile_body_is_413_or_422_and_writes_nothing(
    api: Api, r: redis.Redis, body: bytes, content_type: str | None
) -> None:
    await submit(api)
    headers = {**KEY, **({"content-type": content_type} if content_type else {})}

    with Untouched(r):  # the status first, so that a failure says what came back
        response = await asyncio.wait_for(
            api.client.post("/enqueue-task", content=body, headers=headers), WAIT_S
        )
        assert_json_detail(response, 413, 422)


@pytest.mark.parametrize("length", ["99999999999999999999999", "1e3", "-1", "0x10", " 10"])
async def test_a_nonsense_content_length_is_413_and_writes_nothing(
    api: Api, r: redis.Redis, length: str
) -> None:
    with Untouched(r):
        response = await api.client.post(
            "/enqueue-task", content=VALID, headers={**KEY, **JSON, "content-length": length}
        )
        assert_json_detail(response, 413)


# -- Last-Event-ID --------------------------------------------------------------------------------
GARBAGE_EVENT_IDS: dict[str, bytes] = {
    "word": b"garbage",
    "empty": b"",
    "dollar": b"$",
    "plus": b"+",
    "minus": b"-",
    "star": b"*",
    "greater": b">",
    "three-parts": b"1-2-3",
    "negative": b"-1-0",
    "ms-over-64-bits": b"99999999999999999999999-0",
    "seq-over-64-bits": b"0-99999999999999999999999",
    "largest": b"18446744073709551615-18446744073709551615",
    "huge-10kb": b"1" * 10_240,
    "full-width-digits": "\uff11\uff12-\uff10".encode(),
    "latin1": "é-1".encode("latin-1"),
    "redis-command": b"0\r\nFLUSHALL\r\n",
}


@pytest.mark.parametrize("last_event_id", GARBAGE_EVENT_IDS.values(), ids=GARBAGE_EVENT_IDS.keys())
async def test_a_garbage_last_event_id_replays_a_finished_job_and_ends(
    api: Api, r: redis.Redis, worker: Worker, last_event_id: bytes
) -> None:
    task_id = await submit(api)
    await asyncio.to_thread(worker.run, task_id)
    before = stored(r)

    response = await asyncio.wait_for(  # a stream that does not end fails here
        api.client.get(
            f"/task-status/stream/{task_id}",
            headers=[(b"x-api-key", b"default_api_key"), (b"last-event-id", last_event_id)],
        ),
        WAIT_S,
    )

    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_events(response.text)
    assert [e.data["status"] for e in events] == ["PENDING", "STARTED", "SUCCESS"]
    assert all(e.data["task_id"] == task_id for e in events)
    assert stored(r) == before, "reading the stream changed Redis"


async def test_an_event_id_past_the_end_of_a_finished_job_is_204(
    api: Api, r: redis.Redis, worker: Worker
) -> None:
    task_id = await submit(api)
    await asyncio.to_thread(worker.run, task_id)
    before = stored(r)

    response = await asyncio.wait_for(
        api.client.get(
            f"/task-status/stream/{task_id}",
            headers={**KEY, "last-event-id": "18446744073709551615-0"},
        ),
        WAIT_S,
    )

    assert response.status_code == 204
    assert response.content == b""
    assert stored(r) == before
