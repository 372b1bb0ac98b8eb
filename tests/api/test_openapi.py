"""The OpenAPI schema: every endpoint, with the errors it answers, as the contract describes them.
An admin reads the whole schema at /admin/openapi.json; /openapi.json is the same less the
admin paths."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Api
from tests.api.helpers import KEY, SECOND_KEY

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): they read the schema."""
    return shared_api


ERROR = {"$ref": "#/components/schemas/ErrorBody"}
#: What each endpoint can answer, and the schema of each error's JSON body.
CONTRACT: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/enqueue-task"): {
        "401": ERROR,
        "402": ERROR,
        "403": ERROR,
        "413": ERROR,
        "422": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("get", "/task-status/{task_id}"): {"401": ERROR, "404": ERROR, "429": ERROR, "503": ERROR},
    ("get", "/task-status/stream/{task_id}"): {
        "401": ERROR,
        "404": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("delete", "/tasks/{task_id}"): {
        "401": ERROR,
        "404": ERROR,
        "409": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("get", "/billing-records"): {
        "401": ERROR,
        "404": ERROR,
        "422": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("get", "/usage"): {"401": ERROR, "422": ERROR, "429": ERROR, "503": ERROR},
    ("get", "/job-types"): {"401": ERROR, "429": ERROR, "503": ERROR},
    ("get", "/health"): {"503": {"$ref": "#/components/schemas/Health"}},
    ("get", "/metrics"): {"503": ERROR},
    ("get", "/account"): {"401": ERROR, "429": ERROR, "503": ERROR},
    ("get", "/tasks"): {"401": ERROR, "422": ERROR, "429": ERROR, "503": ERROR},
    ("get", "/tasks/{task_id}/logs"): {
        "401": ERROR,
        "404": ERROR,
        "422": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("get", "/tasks/{task_id}/artifacts"): {"401": ERROR, "404": ERROR, "429": ERROR, "503": ERROR},
    ("get", "/tasks/{task_id}/artifacts/{name}"): {
        "401": ERROR,
        "404": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("post", "/code"): {
        "401": ERROR,
        "403": ERROR,
        "413": ERROR,
        "415": ERROR,
        "422": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("get", "/code/{code_id}"): {"401": ERROR, "404": ERROR, "429": ERROR, "503": ERROR},
    # Admin endpoints answer 404, not 401, to a key that is not an admin's (or to none).
    ("get", "/admin/queues"): {"404": ERROR, "429": ERROR, "503": ERROR},
    ("post", "/admin/tasks/{task_id}/promote"): {
        "404": ERROR,
        "409": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("post", "/admin/tasks/{task_id}/release"): {
        "404": ERROR,
        "409": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("post", "/admin/queues/{name}/drop"): {"404": ERROR, "422": ERROR, "429": ERROR, "503": ERROR},
    ("get", "/admin/accounts"): {"404": ERROR, "429": ERROR, "503": ERROR},
    ("post", "/admin/accounts"): {
        "404": ERROR,
        "409": ERROR,
        "422": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("get", "/admin/accounts/{user_id}"): {"404": ERROR, "422": ERROR, "429": ERROR, "503": ERROR},
    ("patch", "/admin/accounts/{user_id}"): {
        "404": ERROR,
        "422": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("get", "/admin/accounts/{user_id}/keys"): {
        "404": ERROR,
        "422": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("post", "/admin/accounts/{user_id}/keys"): {
        "404": ERROR,
        "422": ERROR,
        "429": ERROR,
        "503": ERROR,
    },
    ("delete", "/admin/keys/{key_id}"): {"404": ERROR, "422": ERROR, "429": ERROR, "503": ERROR},
    ("get", "/admin/audit"): {"404": ERROR, "422": ERROR, "429": ERROR, "503": ERROR},
}
#: What an endpoint answers on success, where it is not a plain 200.
SUCCESSES = {
    ("get", "/task-status/stream/{task_id}"): {"200", "204"},  # 204: its job has ended
    ("delete", "/tasks/{task_id}"): {"200", "202"},  # 202: a running job was asked to stop
    ("post", "/admin/accounts"): {"201"},
    ("post", "/admin/accounts/{user_id}/keys"): {"201"},
    ("post", "/code"): {"200", "201"},  # 200: the account had that code already
}
UNKEYED = {"/health", "/metrics"}


async def schema(api: Api) -> dict[str, Any]:
    """The whole schema, as an admin reads it."""
    response = await api.client.get("/admin/openapi.json", headers=KEY)
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


async def test_the_public_schema_is_the_whole_one_less_the_admin_paths(api: Api) -> None:
    public = (await api.client.get("/openapi.json")).json()
    whole = await schema(api)

    assert set(public["paths"]) == {p for p in whole["paths"] if not p.startswith("/admin/")}
    assert all(public["paths"][p] == whole["paths"][p] for p in public["paths"])
    # Nor does it name the shapes only the admin operations use.
    assert "QueuesView" in whole["components"]["schemas"]
    assert "QueuesView" not in public["components"]["schemas"]
    assert "TaskStatus" in public["components"]["schemas"]


@pytest.mark.parametrize("headers", [{}, SECOND_KEY], ids=["no key", "not an admin's key"])
async def test_the_whole_schema_is_hidden_from_all_but_admins(
    api: Api, headers: dict[str, str]
) -> None:
    response = await api.client.get("/admin/openapi.json", headers=headers)
    assert response.status_code == 404
    assert response.json() == {"detail": "Not Found"}


def json_schema(response: dict[str, Any]) -> Any:
    return response["content"]["application/json"]["schema"]


async def test_every_endpoint_is_described(api: Api) -> None:
    paths = (await schema(api))["paths"]

    described = {(method, path) for path, ops in paths.items() for method in ops}
    assert described == set(CONTRACT)


@pytest.mark.parametrize(("method", "path"), CONTRACT.keys(), ids=lambda x: str(x))
async def test_each_error_an_endpoint_answers_is_documented_with_its_body(
    api: Api, method: str, path: str
) -> None:
    responses = (await schema(api))["paths"][path][method]["responses"]

    for code, body in CONTRACT[method, path].items():
        assert code in responses, f"{method.upper()} {path} does not document {code}"
        assert json_schema(responses[code]) == body


@pytest.mark.parametrize(("method", "path"), CONTRACT.keys(), ids=lambda x: str(x))
async def test_no_endpoint_documents_an_error_it_cannot_answer(
    api: Api, method: str, path: str
) -> None:
    """The task ids are plain strings (a malformed one is the 404), so FastAPI's automatic 422
    on the two status endpoints describes an answer that never comes."""
    responses = (await schema(api))["paths"][path][method]["responses"]

    successes = SUCCESSES.get((method, path), {"200"})
    assert set(responses) == {*successes, *CONTRACT[method, path]}


async def test_the_success_bodies_are_described(api: Api) -> None:
    paths = (await schema(api))["paths"]

    def ok(method: str, path: str) -> dict[str, Any]:
        response: dict[str, Any] = paths[path][method]["responses"]["200"]
        return response

    assert json_schema(ok("post", "/enqueue-task")) == {
        "$ref": "#/components/schemas/EnqueueResponse"
    }
    assert json_schema(ok("get", "/task-status/{task_id}")) == {
        "$ref": "#/components/schemas/TaskStatus"
    }
    assert set(ok("get", "/task-status/stream/{task_id}")["content"]) == {"text/event-stream"}
    assert json_schema(ok("get", "/billing-records"))["items"] == {
        "$ref": "#/components/schemas/BillingRecord"
    }
    assert json_schema(ok("get", "/health")) == {"$ref": "#/components/schemas/Health"}


async def test_the_request_body_refuses_unknown_fields_and_non_positive_durations(
    api: Api,
) -> None:
    request = (await schema(api))["components"]["schemas"]["EnqueueRequest"]

    assert request["additionalProperties"] is False
    assert set(request["required"]) == {"kind", "duration_s"}
    assert request["properties"]["kind"]["enum"] == ["short", "long"]
    assert request["properties"]["duration_s"]["exclusiveMinimum"] == 0


async def test_the_request_body_is_either_the_original_one_or_a_typed_one(api: Api) -> None:
    body = await schema(api)
    request = body["paths"]["/enqueue-task"]["post"]["requestBody"]["content"]
    shapes = request["application/json"]["schema"]["oneOf"]
    assert shapes == [
        {"$ref": "#/components/schemas/EnqueueRequest"},
        {"$ref": "#/components/schemas/TypedEnqueueRequest"},
    ]

    typed = body["components"]["schemas"]["TypedEnqueueRequest"]
    assert typed["additionalProperties"] is False
    assert typed["required"] == ["type"]
    assert typed["properties"]["input"]["type"] == "object"
    assert typed["properties"]["duration_s"]["anyOf"][0]["exclusiveMinimum"] == 0


async def test_the_job_types_and_a_jobs_type_and_end_are_described(api: Api) -> None:
    body = await schema(api)
    listed = body["paths"]["/job-types"]["get"]["responses"]["200"]
    assert json_schema(listed)["items"] == {"$ref": "#/components/schemas/JobTypeView"}
    view = body["components"]["schemas"]["JobTypeView"]
    assert set(view["required"]) == {
        "name",
        "queue",
        "max_duration_s",
        "description",
        "input_schema",
        "output_schema",
        "available",
    }

    status = body["components"]["schemas"]["TaskStatus"]["properties"]
    assert status["type"]["default"] == "burn"
    assert status["error_kind"]["anyOf"][0]["enum"] == [
        "exception",
        "timeout",
        "cancelled",
        "crashed",
        "lost",
        "oom",
        "setup",
        "internal",
        "environment",
        "exit_code",
    ]
    result = body["components"]["schemas"]["JobResult"]["properties"]
    assert {"output", "peak_gpu_memory_bytes", "peak_rss_bytes"} <= set(result)
    assert {"exit_code", "environment"} <= set(result)


async def test_the_keyed_endpoints_declare_the_api_key_header(api: Api) -> None:
    body = await schema(api)

    assert body["components"]["securitySchemes"]["APIKeyHeader"] == {
        "type": "apiKey",
        "in": "header",
        "name": "X-API-Key",
        "description": "An account's API key, issued by an admin or seeded from the accounts file",
    }
    for method, path in CONTRACT:
        security = body["paths"][path][method].get("security")
        expected = None if path in UNKEYED else [{"APIKeyHeader": []}]
        assert security == expected, f"{method.upper()} {path}"


async def test_error_bodies_have_a_detail(api: Api) -> None:
    error = (await schema(api))["components"]["schemas"]["ErrorBody"]

    assert error["required"] == ["detail"]
