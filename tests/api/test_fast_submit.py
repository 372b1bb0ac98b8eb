"""The submit's fast path (app/api/fast_submit.py) answers exactly as the FastAPI route does.

Every case below, a request or a short sequence of them, is sent to an app with the fast path
and to one without it, each from the same empty database; their answers (status, headers, body,
task ids aside) must be the same, and the jobs they queued too. The fast path must also really
be taken for the requests it is meant for, or the comparison would prove nothing.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis
from fastapi import FastAPI

from app.api.factory import create_app
from app.api.fast_submit import SubmitFastPath
from app.dev.redis_server import free_port
from app.settings import Settings
from tests.api.conftest import running
from tests.api.typed_jobs import ECHO, MISSING

pytestmark = pytest.mark.anyio

KEY = b"default_api_key"
JSON = (b"content-type", b"application/json")
BURN = b'{"kind": "short", "duration_s": 1}'
ECHO_JOB = json.dumps({"type": ECHO, "input": {"text": "hi", "points": [{"x": 1, "y": 2}]}})
OVER_ITS_LIMIT = json.dumps({"type": ECHO, "input": {"text": "x"}, "duration_s": 11}).encode()
WEBHOOK = b'{"kind": "short", "duration_s": 1, "webhook": "https://example.com/h"}'
UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Sent:
    """One request: its raw headers (the API key and Content-Type first, unless given) and
    its body, whole or in chunks."""

    body: bytes | list[bytes] = BURN
    headers: list[tuple[bytes, bytes]] = field(default_factory=lambda: [(b"x-api-key", KEY), JSON])


def idem(key: bytes, body: bytes = BURN) -> Sent:
    return Sent(body, [(b"x-api-key", KEY), JSON, (b"idempotency-key", key)])


#: Requests the fast path takes (a 200, or an answer from the submit itself).
TAKEN = {
    "burn": [Sent()],
    "burn-long": [Sent(b'{"kind": "long", "duration_s": 2.5}')],
    "typed": [Sent(ECHO_JOB.encode())],
    "typed-as-burn": [Sent(b'{"type": "burn", "input": {}, "duration_s": 3}')],
    "json-suffix": [Sent(headers=[(b"x-api-key", KEY), (b"content-type", b"application/x+json")])],
    "json-charset": [
        Sent(headers=[(b"x-api-key", KEY), (b"content-type", b"Application/JSON; charset=utf-8")])
    ],
    "idempotent-replay": [idem(b"same-key"), idem(b"same-key")],
    "idempotent-other-body": [idem(b"key-2"), idem(b"key-2", b'{"kind": "long", "duration_s": 1}')],
    "idempotency-key-255": [idem(b"k" * 255)],
    "other-account": [Sent(headers=[(b"x-api-key", b"second_api_key"), JSON])],
}
#: Requests the fast path hands to the route, which refuses them.
HANDED_ON = {
    "no-key": [Sent(headers=[JSON])],
    "wrong-key": [Sent(headers=[(b"x-api-key", b"wrong"), JSON])],
    "key-twice": [Sent(headers=[(b"x-api-key", KEY), (b"x-api-key", KEY), JSON])],
    "no-content-type": [Sent(headers=[(b"x-api-key", KEY)])],
    "text-plain": [Sent(headers=[(b"x-api-key", KEY), (b"content-type", b"text/plain")])],
    "content-type-twice": [Sent(headers=[(b"x-api-key", KEY), JSON, JSON])],
    "not-json": [Sent(b"kind=short")],
    "duplicate-keys": [Sent(b'{"kind": "short", "kind": "long", "duration_s": 1}')],
    "bom": [Sent(b"\xef\xbb\xbf" + BURN)],
    "not-utf8": [Sent(b'{"kind": "short\xff", "duration_s": 1}')],
    "too-deep": [Sent(b"[" * 5000 + b"]" * 5000)],
    "a-list": [Sent(b"[]")],
    "empty": [Sent(b"")],
    "missing-field": [Sent(b'{"kind": "short"}')],
    "extra-field": [Sent(b'{"kind": "short", "duration_s": 1, "gpu": 2}')],
    "wrong-kind": [Sent(b'{"kind": "medium", "duration_s": 1}')],
    "negative": [Sent(b'{"kind": "short", "duration_s": -1}')],
    "over-the-limit": [Sent(b'{"kind": "short", "duration_s": 1e9}')],
    "nan": [Sent(b'{"kind": "short", "duration_s": NaN}')],
    "unknown-type": [Sent(b'{"type": "no-such-type", "input": {}}')],
    "unavailable-type": [Sent(json.dumps({"type": MISSING, "input": {"text": "x"}}).encode())],
    "bad-input": [Sent(json.dumps({"type": ECHO, "input": {"text": 3}}).encode())],
    "typed-over-its-limit": [Sent(OVER_ITS_LIMIT)],
    "webhook-not-sent-here": [Sent(WEBHOOK)],
    "idempotency-key-space": [idem(b"has space")],
    "idempotency-key-256": [idem(b"k" * 256)],
    "idempotency-key-empty": [idem(b"")],
    "idempotency-key-twice": [
        Sent(headers=[(b"x-api-key", KEY), JSON, *[(b"idempotency-key", b"a")] * 2])
    ],
    "over-64-kib": [Sent(b'{"kind": "short", "duration_s": 1, "x": "' + b"x" * 70_000 + b'"}')],
    "chunked": [Sent([b'{"kind": "short", ', b'"duration_s": 1}'])],
}  # fmt: skip
CAPPED = {"queue-full": [Sent(), Sent(b'{"kind": "long", "duration_s": 1}'), Sent()]}
#: The demo account limited to 60 GPU-seconds held: a job of 120 s is refused, one of 60 s not.
HELD = {
    "over-held-limit": [
        Sent(b'{"kind": "long", "duration_s": 120}'),
        Sent(b'{"kind": "long", "duration_s": 60}'),
    ]
}


@dataclass(frozen=True)
class Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


async def send(client: httpx.AsyncClient, sent: Sent) -> Answer:
    headers = list(sent.headers)  # httpx adds no Content-Type to bytes of its own
    if isinstance(sent.body, list):
        chunks = sent.body

        async def stream() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        request = client.build_request("POST", "/enqueue-task", headers=headers, content=stream())
    else:
        request = client.build_request("POST", "/enqueue-task", headers=headers, content=sent.body)
    response = await client.send(request)
    return Answer(
        response.status_code, response.headers.multi_items(), UUID.sub(b"<id>", response.content)
    )


@contextlib.asynccontextmanager
async def serving(
    settings: Settings, fast: bool
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app = create_app(settings, submit_fast_path=fast)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with running(app), httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield app, client


def fast_path(app: FastAPI) -> SubmitFastPath:
    """The app's SubmitFastPath, found in its (built) middleware stack."""
    layer = app.middleware_stack
    while layer is not None and not isinstance(layer, SubmitFastPath):
        layer = getattr(layer, "app", None)
    assert isinstance(layer, SubmitFastPath), "the app has no fast path"
    return layer


@dataclass(frozen=True)
class Compared:
    """The answers of the app with the fast path (the same as without it), the jobs it
    queued (the same too), and how many requests the fast path answered itself."""

    answers: dict[str, list[Answer]]
    jobs: list[bytes]
    answered: int

    def statuses(self) -> dict[str, list[int]]:
        return {name: [a.status for a in case] for name, case in self.answers.items()}


async def compared(
    settings: Settings, cases: dict[str, list[Sent]], r: redis.Redis | None
) -> Compared:
    """Each case sent to an app with the fast path, then to one without it, each fresh on an
    empty database (r None: a Redis that is not there); their answers and jobs must agree."""
    runs = []
    for fast in (True, False):
        if r is not None:
            r.flushall()
        async with serving(settings, fast) as (app, client):
            found = {n: [await send(client, sent) for sent in case] for n, case in cases.items()}
            answered = fast_path(app).answered if fast else 0
        runs.append(Compared(found, [] if r is None else queued_jobs(r), answered))
    with_it, without = runs
    assert with_it.answers == without.answers
    assert with_it.jobs == without.jobs
    return with_it


def queued_jobs(r: redis.Redis) -> list[bytes]:
    """The fields of every job record, sorted, with ids and times masked."""
    records = []
    for key in r.scan_iter(match="fairgpu:job:*"):
        if r.type(key) != b"hash":
            continue
        fields = sorted(r.hgetall(key).items())
        text = b";".join(k + b"=" + v for k, v in fields if not k.endswith(b"_at"))
        records.append(UUID.sub(b"<id>", text))
    return sorted(records)


@pytest.fixture
def typed(settings: Settings) -> Settings:
    return settings.model_copy(update={"job_modules": ["tests.api.typed_jobs"]})


async def test_what_the_fast_path_takes_is_answered_as_the_route_answers(
    typed: Settings, r: redis.Redis
) -> None:
    got = await compared(typed, TAKEN, r)

    assert len(got.jobs) == 10  # every case queues one job (a replay queues none)
    assert got.answered == sum(len(case) for case in TAKEN.values())
    assert got.statuses()["idempotent-other-body"] == [200, 422]  # the submit's own 422


async def test_what_the_fast_path_hands_on_is_answered_by_the_route(
    typed: Settings, r: redis.Redis
) -> None:
    got = await compared(typed, HANDED_ON, r)

    assert got.answered == 0
    statuses = got.statuses()
    # Valid, but in a shape that the fast path leaves to the route: a header that comes twice
    # (the route's reading of it counts), a body whose length is not known before it is read.
    valid = {"key-twice", "content-type-twice", "idempotency-key-twice", "chunked"}
    assert {name for name, case in statuses.items() if case == [200]} == valid
    assert len(got.jobs) == len(valid)
    assert statuses["no-key"] == statuses["wrong-key"] == [401]
    assert statuses["over-64-kib"] == [413]
    refused = {s for name, case in statuses.items() for s in case if name not in valid}
    assert refused == {401, 413, 422}


async def test_a_full_queue_is_the_same_429(settings: Settings, r: redis.Redis) -> None:
    capped = settings.model_copy(update={"max_queued_per_account": 1})
    got = await compared(capped, CAPPED, r)

    assert got.statuses()["queue-full"] == [200, 200, 429]
    assert got.answered == 3


async def test_a_job_over_the_held_limit_is_the_same_422(
    settings: Settings, r: redis.Redis, tmp_path: Path
) -> None:
    accounts = json.loads(settings.users_file.read_text())
    accounts["accounts"][0]["max_held_gpu_seconds"] = 60  # the demo key's account
    limited = tmp_path / "users.json"
    limited.write_text(json.dumps(accounts))
    got = await compared(settings.model_copy(update={"users_file": limited}), HELD, r)

    assert got.statuses()["over-held-limit"] == [422, 200]
    assert b"max_held_gpu_seconds (60)" in got.answers["over-held-limit"][0].body
    assert got.answered == 2
    assert len(got.jobs) == 1


async def test_redis_away_is_the_same_503(settings: Settings) -> None:
    away = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    got = await compared(away, {"burn": [Sent()]}, None)

    assert got.statuses()["burn"] == [503]
    assert got.answered == 1
