"""The schema's `webhook` says the form the API enforces: every URL it takes passes the API's URL
rules (app/webhooks/destination.py parse), and what those rules refuse, it refuses; a submit's
webhook is judged for its form first, whatever the deployment."""

from __future__ import annotations

from typing import Any

import hypothesis
import jsonschema_rs
import pytest
import redis
from hypothesis import strategies as st

from app.webhooks import destination
from tests.api.conftest import Api
from tests.api.helpers import KEY, Untouched, schema_app
from tests.support import examples

SCHEMA = schema_app().openapi()
SHAPES = ("EnqueueRequest", "TypedEnqueueRequest")


def webhook_of(shape: str) -> dict[str, Any]:
    """The webhook's schema in one of the bodies, without its null."""
    field = SCHEMA["components"]["schemas"][shape]["properties"]["webhook"]
    [url] = [option for option in field["anyOf"] if option["type"] == "string"]
    return dict(url)


URL = webhook_of("EnqueueRequest")
VALID = jsonschema_rs.validator_for(URL, validate_formats=True)


def test_both_bodies_give_the_webhook_the_same_url_schema() -> None:
    assert [webhook_of(shape) for shape in SHAPES] == [URL, URL]
    assert (URL["format"], URL["minLength"], URL["maxLength"]) == ("uri", 1, 2048)


@hypothesis.settings(max_examples=examples(300), deadline=None)
@hypothesis.given(st.from_regex(URL["pattern"], fullmatch=True))
def test_a_url_the_schema_takes_passes_the_api_s_url_rules(url: str) -> None:
    hypothesis.assume(VALID.is_valid(url))

    destination.parse(url)  # raises RefusedError for a URL the API refuses


@pytest.mark.parametrize(
    "url",
    [
        "0",
        "not a url",
        "ftp://93.184.215.14/hook",
        "93.184.215.14/hook",
        "https:///hook",
        "https://user:password@93.184.215.14/hook",
        "https://93.184.215.14/ho ok",
        "https://93.184.215.14:70000/hook",
        "https://93.184.215.14:0/hook",
        "http://999.1.1.1/hook",
        "https://-bad-.example/hook",
        "https://" + "a" * 64 + ".example/hook",
        "https://" + "a." * 127 + "example/hook",
    ],
)
def test_a_url_the_api_refuses_the_schema_refuses(url: str) -> None:
    with pytest.raises(destination.RefusedError):
        destination.parse(url)
    assert not VALID.is_valid(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://93.184.215.14/hooks/fairgpu?token=abc",
        "http://localhost:8080/hook",
        "HTTPS://Hooks.Example.COM.:65535/a/b?c=d&e=%20#f",
        "https://example.com",
    ],
)
def test_a_url_the_api_takes_the_schema_takes(url: str) -> None:
    destination.parse(url)
    assert VALID.is_valid(url)


@pytest.mark.anyio
async def test_a_malformed_webhook_is_refused_for_its_form_even_without_webhooks(
    api: Api, r: redis.Redis
) -> None:
    """The deployment of the tests sends no webhooks (no WEBHOOK_SECRET): the form is judged
    first, as the schema states it."""
    with Untouched(r):
        response = await api.client.post(
            "/enqueue-task", json={"kind": "short", "duration_s": 1, "webhook": "0"}, headers=KEY
        )

    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert (error["loc"], error["type"]) == (["body", "webhook"], "webhook_url")
