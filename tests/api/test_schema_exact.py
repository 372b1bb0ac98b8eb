"""The schema says exactly what is accepted: what it allows gets a 2xx, and what the server
refuses, the schema refuses too or documents (the mismatches a schemathesis run found)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from tests.api.conftest import Api
from tests.api.helpers import KEY

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): they read the schema and what a
    job's answers hold."""
    return shared_api


async def whole_schema(api: Api) -> dict[str, Any]:
    body: dict[str, Any] = (await api.client.get("/admin/openapi.json", headers=KEY)).json()
    return body


async def test_every_text_the_cursor_pattern_allows_is_a_cursor(api: Api) -> None:
    [cursor] = [
        p
        for p in (await whole_schema(api))["paths"]["/tasks"]["get"]["parameters"]
        if p["name"] == "cursor"
    ]
    pattern = cursor["schema"]["anyOf"][0]["pattern"]
    never_given = f"1.5_{uuid.uuid4()}"
    assert re.fullmatch(pattern, never_given)
    assert not re.fullmatch(pattern, "0")

    served = await api.client.get("/tasks", params={"cursor": never_given}, headers=KEY)
    assert served.status_code == 200, served.text
    refused = await api.client.get("/tasks", params={"cursor": "0"}, headers=KEY)
    assert refused.status_code == 422


async def test_a_drop_s_confirm_is_one_of_the_queue_names_in_the_schema(api: Api) -> None:
    request = (await whole_schema(api))["components"]["schemas"]["DropRequest"]
    assert request["properties"]["confirm"]["enum"] == ["short", "long"]

    empty = await api.client.post("/admin/queues/short/drop", json={"confirm": ""}, headers=KEY)
    assert empty.status_code == 422
    assert empty.json()["detail"][0]["loc"] == ["body", "confirm"]


async def test_an_idempotency_key_used_with_another_body_is_a_documented_422(api: Api) -> None:
    responses = (await whole_schema(api))["paths"]["/enqueue-task"]["post"]["responses"]
    assert "Idempotency-Key" in responses["422"]["description"]

    headers = {**KEY, "Idempotency-Key": "once"}
    first = await api.client.post(
        "/enqueue-task", json={"kind": "short", "duration_s": 1}, headers=headers
    )
    assert first.status_code == 200
    other = await api.client.post(
        "/enqueue-task", json={"kind": "short", "duration_s": 2}, headers=headers
    )
    assert other.status_code == 422
