"""POST /enqueue-task with a webhook, in either body: an http(s) URL whose host, when it is an
address (or a localhost name), is a public one (unless WEBHOOK_ALLOW_PRIVATE), in a deployment
that has a WEBHOOK_SECRET; stored with the job. A name is not resolved at submit: the sender
resolves and checks it before each attempt (tests/webhooks/test_sender.py). Anything else is a
422 that names the field, never the value, and writes nothing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis
from pydantic import SecretStr

from app.settings import Settings
from app.store.keys import job_key
from app.webhook_url import WEBHOOK_PATTERN
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, Untouched

pytestmark = pytest.mark.anyio
SECRET = SecretStr("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
PUBLIC = "https://93.184.215.14/hooks/fairgpu?token=abc"
BURN = {"kind": "short", "duration_s": 1}
TYPED = {"type": "burn", "duration_s": 1}


@pytest.fixture(scope="module")
def module_settings(module_settings: Settings) -> Settings:
    return module_settings.model_copy(update={"webhook_secret": SECRET})


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py), with webhooks on: a submit's
    answer and what it writes live in Redis, emptied for each test."""
    return shared_api


async def post(api: Api, body: dict[str, Any], **headers: str) -> httpx.Response:
    return await api.client.post("/enqueue-task", json=body, headers={**KEY, **headers})


def webhook_of(r: redis.Redis, task_id: str) -> bytes | None:
    value: bytes | None = r.hget(job_key(task_id), "webhook")
    return value


async def refused(api: Api, r: redis.Redis, body: dict[str, Any]) -> dict[str, Any]:
    """The one error of a 422 that changed nothing in Redis."""
    with Untouched(r):
        response = await post(api, body)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "webhook"]
    return dict(error)


@pytest.mark.parametrize("shape", [BURN, TYPED])
async def test_a_public_webhook_is_stored_with_the_job(
    api: Api, r: redis.Redis, shape: dict[str, Any]
) -> None:
    response = await post(api, {**shape, "webhook": PUBLIC})

    assert response.status_code == 200, response.text
    assert webhook_of(r, response.json()["task_id"]) == PUBLIC.encode()


async def test_a_job_without_a_webhook_has_none(api: Api, r: redis.Redis) -> None:
    for body in (BURN, {**BURN, "webhook": None}):
        response = await post(api, body)
        assert response.status_code == 200
        assert webhook_of(r, response.json()["task_id"]) is None


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://127.0.0.1:8080/hook", "loopback"),
        ("http://localhost/hook", "loopback"),
        ("http://[::1]/hook", "loopback"),
        ("http://10.0.0.7/hook", "private"),
        ("http://192.168.1.20/hook", "private"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://[::ffff:127.0.0.1]/hook", "loopback"),
        ("http://0.0.0.0/hook", "unspecified"),
    ],
)
@pytest.mark.parametrize("shape", [BURN, TYPED])
async def test_a_private_or_loopback_webhook_is_a_422(
    api: Api, r: redis.Redis, url: str, address: str, shape: dict[str, Any]
) -> None:
    error = await refused(api, r, {**shape, "webhook": url})

    assert error["type"] == "webhook_address"
    assert f"a {address} address" in error["msg"]


async def test_private_webhooks_are_allowed_when_the_deployment_says_so(
    settings: Settings, r: redis.Redis
) -> None:
    allowed = settings.model_copy(update={"webhook_secret": SECRET, "webhook_allow_private": True})
    async with open_api(allowed) as api:
        response = await post(api, {**BURN, "webhook": "http://localhost:8080/hook"})

    assert response.status_code == 200, response.text
    assert webhook_of(r, response.json()["task_id"]) == b"http://localhost:8080/hook"


@pytest.mark.parametrize(
    "url",
    [
        "ftp://93.184.215.14/hook",
        "93.184.215.14/hook",
        "https:///hook",
        "https://user:password@93.184.215.14/hook",
        "https://93.184.215.14/ho ok",
        "https://93.184.215.14:70000/hook",
        "not a url",
    ],
)
async def test_a_webhook_that_is_not_an_http_url_is_a_422(
    api: Api, r: redis.Redis, url: str
) -> None:
    error = await refused(api, r, {**BURN, "webhook": url})

    assert error["type"] == "webhook_url"


async def test_a_webhook_host_name_is_not_resolved_at_submit(api: Api, r: redis.Redis) -> None:
    # .invalid never resolves (RFC 6761): the sender's check refuses it before each attempt
    url = "https://no-such-host.invalid/hook"
    response = await post(api, {**TYPED, "webhook": url})

    assert response.status_code == 200, response.text
    assert webhook_of(r, response.json()["task_id"]) == url.encode()


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://10.0.0.7:8080/hook", ["10.0.0.7", "8080"]),
        ("http://[fd12:3456::7]/hook", ["fd12", "3456"]),
        ("http://api.localhost/hook", ["api.localhost", "api"]),
        ("ftp://files.example.com/hook", ["files.example.com", "ftp://"]),
    ],
)
async def test_a_refused_webhook_is_never_repeated_in_the_422(
    api: Api, r: redis.Redis, url: str, said: list[str]
) -> None:
    with Untouched(r):
        response = await post(api, {**BURN, "webhook": url})

    assert response.status_code == 422, response.text
    assert [e["loc"] for e in response.json()["detail"]] == [["body", "webhook"]]  # the field
    for part in said:  # its value, or any part of it, is not
        assert part not in response.text


async def test_an_unknown_field_is_named_and_its_value_is_not_repeated(
    api: Api, r: redis.Redis
) -> None:
    with Untouched(r):
        response = await post(api, {**BURN, "callback_url": "https://internal.example/x"})

    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert (error["loc"], error["type"]) == (["body", "callback_url"], "extra_forbidden")
    assert "internal.example" not in response.text


@pytest.mark.parametrize("webhook", ["", "https://93.184.215.14/" + "a" * 2048, 42, ["x"]])
async def test_a_webhook_that_is_not_a_string_of_1_to_2048_characters_is_a_422(
    api: Api, r: redis.Redis, webhook: object
) -> None:
    with Untouched(r):
        response = await post(api, {**BURN, "webhook": webhook})

    assert response.status_code == 422
    assert [e["loc"][-1] for e in response.json()["detail"]] == ["webhook"]


async def test_without_a_secret_a_webhook_is_a_422_that_says_so(
    settings: Settings, r: redis.Redis
) -> None:
    for secret in (None, SecretStr("")):
        async with open_api(settings.model_copy(update={"webhook_secret": secret})) as api:
            error = await refused(api, r, {**BURN, "webhook": PUBLIC})

        assert error["type"] == "webhooks_disabled"
        assert "this deployment sends no webhooks" in error["msg"]


async def test_the_idempotency_key_covers_the_webhook(api: Api, r: redis.Redis) -> None:
    first = await post(api, {**BURN, "webhook": PUBLIC}, **{"Idempotency-Key": "k1"})
    again = await post(api, {**BURN, "webhook": PUBLIC}, **{"Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()

    other = await post(api, {**BURN, "webhook": PUBLIC + "&x"}, **{"Idempotency-Key": "k1"})
    assert other.status_code == 422
    assert "Idempotency-Key" in other.json()["detail"]
    without = await post(api, BURN, **{"Idempotency-Key": "k1"})
    assert without.status_code == 422
    assert len(r.keys(job_key("*"))) == 1


async def test_the_schema_describes_the_webhook_in_both_bodies(api: Api) -> None:
    schemas = (await api.client.get("/openapi.json")).json()["components"]["schemas"]
    for shape in ("EnqueueRequest", "TypedEnqueueRequest"):
        webhook = schemas[shape]["properties"]["webhook"]
        assert webhook["anyOf"] == [
            {
                "type": "string",
                "minLength": 1,
                "maxLength": 2048,
                "format": "uri",
                "pattern": WEBHOOK_PATTERN,
            },
            {"type": "null"},
        ]
        assert "private or loopback" in webhook["description"]
        assert "webhook" not in schemas[shape].get("required", [])
