"""No refused request is free: a 4xx to a request with a valid key counts against the key's rate
as a served request does (once), and past the rate it is a 429; a request without a valid key
counts nothing and sends Redis nothing; no refusal writes a log line of its own."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
import redis
from pydantic import SecretStr
from starlette.types import Message, Receive, Scope, Send

from app.api import submissions
from app.api.limits import ErrorRate
from app.settings import Settings
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, UNAUTHORIZED, Untouched

pytestmark = pytest.mark.anyio
PER_S = 3
BIG = 64 * 1024 + 1  # over MAX_BODY_BYTES
MALFORMED_ID = "not-a-uuid"


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests that take the suite's rate (tests/api/conftest.py): what
    they count lives in Redis, emptied for each test. strict_api is opened per test: its tests allow
    not a single command of a runtime's own (a clock's sync) while they run."""
    return shared_api


@pytest.fixture
async def strict_api(settings: Settings) -> AsyncIterator[Api]:
    """An API that lets a key make PER_S requests a second."""
    async with open_api(settings.model_copy(update={"rate_limit_per_s": PER_S})) as api:
        yield api


async def refusal(api: Api, kind: str, headers: dict[str, str]) -> httpx.Response:
    """One request that is refused with a 4xx before its endpoint runs."""
    client = api.client
    if kind == "malformed task id":
        return await client.get(f"/task-status/{MALFORMED_ID}", headers=headers)
    if kind == "invalid body":
        return await client.post("/enqueue-task", json={"kind": "medium"}, headers=headers)
    if kind == "body over the limit":
        return await client.post(
            "/enqueue-task", content=b"x" * BIG, headers={**headers, "content-type": "text/plain"}
        )
    if kind == "admin path":
        return await client.get("/admin/queues", headers=headers)
    assert kind == "unknown path"
    return await client.get("/no-such-path", headers=headers)


REFUSALS = [
    "malformed task id",
    "invalid body",
    "body over the limit",
    "admin path",
    "unknown path",
]
STATUS = {"body over the limit": 413, "invalid body": 422}
SECOND_KEY = {"X-API-Key": "second_api_key"}  # not an admin


def counters(r: redis.Redis) -> list[int]:
    return [int(r.get(key) or 0) for key in r.keys("fairgpu:rate:*")]


@pytest.mark.parametrize("kind", REFUSALS)
async def test_refusals_count_against_the_key_and_past_its_rate_are_429(
    strict_api: Api, kind: str
) -> None:
    statuses = [(await refusal(strict_api, kind, SECOND_KEY)).status_code for _ in range(8)]

    # PER_S a second; eight requests may straddle a second boundary, so at most six are answered.
    assert statuses.count(429) >= 2, statuses
    assert set(statuses) == {STATUS.get(kind, 404), 429}
    over = await refusal(strict_api, kind, SECOND_KEY)
    if over.status_code == 429:
        assert over.headers["retry-after"] == "1"
        assert over.json() == {"detail": f"more than {PER_S} requests a second with this key"}


@pytest.mark.parametrize("kind", REFUSALS)
async def test_a_refusal_counts_once(api: Api, r: redis.Redis, kind: str) -> None:
    await refusal(api, kind, SECOND_KEY)

    assert counters(r) == [1]


async def test_a_request_refused_inside_its_endpoint_counts_once(api: Api, r: redis.Redis) -> None:
    """Counted by the route before the endpoint ran (an unknown task), or by the submit's own
    call (an Idempotency-Key used with another body): not a second time as an error."""
    unknown = await api.client.get(f"/task-status/{uuid.uuid4()}", headers=KEY)
    assert unknown.status_code == 404
    assert counters(r) == [1]

    r.flushdb()
    once = {"Idempotency-Key": "k", **KEY}
    first = await api.client.post(
        "/enqueue-task", json={"kind": "short", "duration_s": 1}, headers=once
    )
    other = await api.client.post(
        "/enqueue-task", json={"kind": "short", "duration_s": 2}, headers=once
    )
    assert (first.status_code, other.status_code) == (200, 422)
    assert counters(r) == [2]


async def test_a_crash_before_the_count_counts_against_the_key(api: Api, r: redis.Redis) -> None:
    """A request that crashes where nothing counted it yet (the server then answers 500 and
    logs the traceback) is counted as it fails: a client cannot fill the log for free."""

    async def crashing(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("a bug")

    async def nothing() -> Message:
        return {"type": "http.disconnect"}

    async def ignored(message: Message) -> None:
        pass

    scope = {"type": "http", "headers": [(b"x-api-key", b"second_api_key")], "app": api.app}
    with pytest.raises(RuntimeError, match="a bug"):
        await ErrorRate(crashing)(scope, nothing, ignored)

    assert counters(r) == [1]


@pytest.mark.parametrize("kind", [*REFUSALS, "keyed path"])
@pytest.mark.parametrize("headers", [{}, {"X-API-Key": "wrong_key"}], ids=["no key", "wrong key"])
async def test_without_a_valid_key_nothing_is_counted_and_redis_hears_nothing(
    strict_api: Api, r: redis.Redis, kind: str, headers: dict[str, str]
) -> None:
    with Untouched(r, counted=False):
        for _ in range(2 * PER_S):
            if kind == "keyed path":
                response = await strict_api.client.get("/account", headers=headers)
                assert (response.status_code, response.json()) == (401, UNAUTHORIZED)
            else:
                response = await refusal(strict_api, kind, headers)
                assert response.status_code != 429


async def test_refusals_write_no_log_line(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="app")
    for kind in REFUSALS:
        for headers in ({}, KEY, SECOND_KEY):
            await refusal(api, kind, headers)

    assert [record.getMessage() for record in caplog.records if record.name.startswith("app")] == []


async def test_a_bad_webhook_secret_is_logged_once_not_per_request(
    settings: Settings, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(submissions, "_logged", set())  # what this process has logged so far
    caplog.set_level(logging.DEBUG, logger="app")
    broken = settings.model_copy(update={"webhook_secret": SecretStr("whsec_!not base64!")})
    body = {"kind": "short", "duration_s": 1, "webhook": "https://93.184.215.14/hook"}
    async with open_api(broken) as api:
        for _ in range(3):
            response = await api.client.post("/enqueue-task", json=body, headers=KEY)
            assert response.status_code == 422

    lines = [
        (rec.levelno, rec.getMessage()) for rec in caplog.records if rec.name.startswith("app")
    ]
    assert lines == [
        (logging.ERROR, "webhooks are off: WEBHOOK_SECRET is not a whsec_<base64> key")
    ]
