"""Schemathesis against the real app on the suite's Redis: generated requests, valid and invalid,
for every operation of the OpenAPI schema. No answer may be a 5xx, every answer must be one the
schema documents (status, content type, body), and every operation but /health and /metrics must
answer 401 to a missing or wrong key (the /admin ones 404), whatever else the request holds.

Schemathesis calls the app in-process (ASGI) from its own event-loop thread and runs the app's
lifespan there. The schema is the one the app serves (checked below); the app behind it is lent
per test (APPS, tests/api/conftest.py), its lifespan run on that test's empty Redis, through
`LiveApp`.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import redis
import schemathesis
from fastapi import FastAPI
from schemathesis import checks
from schemathesis.python import asgi
from starlette.types import Receive, Scope, Send

from app.api.runtime import Runtime
from app.api.schema import whole as whole_schema
from app.auth import Accounts
from app.settings import Settings
from tests import support
from tests.api.conftest import APPS, Api
from tests.api.helpers import KEY, UNAUTHORIZED, schema_app
from tests.support import empty_test_database, examples

#: Generated cases per operation and phase (half as many in the unit tier: tests/support.py).
MAX_EXAMPLES = examples(80)
#: The longest one request may take: a stream that does not end is cut off here, not hung on.
REQUEST_TIMEOUT_S = 5.0
#: Sequences of calls in the stateful test.
STATEFUL_EXAMPLES = examples(50)
WRONG_KEY = {"X-API-Key": "wrong_key"}
#: Checks whose premise an operation does not meet, and why.
NOT_APPLICABLE = {
    # "Valid data is accepted" assumes the schema says all a valid job is. It cannot say which
    # types are registered and what their inputs are (GET /job-types says it), the limit that
    # depends on the kind (a short job of 100 s is a 422), whether the deployment sends webhooks
    # and where a webhook's host resolves; submit_refused_only_beyond_the_schema checks instead
    # that a valid body is refused for nothing else.
    "POST /enqueue-task": [checks.positive_data_acceptance],
    # The schema says POST /code's body is bytes; which bytes are a readable .tar.gz of regular
    # files within the bounds, no schema can say (tests/api/test_code.py checks each refusal).
    "POST /code": [checks.positive_data_acceptance],
    # The admin operations (in the admins' schema only) answer a request without an admin's key
    # 404, as if they were not there, where "ignored auth" wants a 401; the second part of the
    # test below checks that 404 instead. Nor can the schema say that a drop's `confirm` must
    # repeat the queue's name in the path (else a 422).
    "GET /admin/queues": [checks.ignored_auth],
    "POST /admin/tasks/{task_id}/promote": [checks.ignored_auth],
    "POST /admin/tasks/{task_id}/release": [checks.ignored_auth],
    "POST /admin/queues/{name}/drop": [checks.positive_data_acceptance, checks.ignored_auth],
    **{
        operation: [checks.ignored_auth]
        for operation in (
            "GET /admin/accounts",
            "POST /admin/accounts",
            "GET /admin/accounts/{user_id}",
            "PATCH /admin/accounts/{user_id}",
            "GET /admin/accounts/{user_id}/keys",
            "POST /admin/accounts/{user_id}/keys",
            "DELETE /admin/keys/{key_id}",
            "GET /admin/audit",
        )
    },
}


#: The 422s of a submit that the schema calls valid which only the deployment can decide (see
#: NOT_APPLICABLE): an unknown or unavailable type, webhooks off, a webhook host given as an
#: address that is not public (a name is resolved at delivery only, never at submit). Errors
#: under the body's `input` are its type's (GET /job-types).
BEYOND_THE_SCHEMA = frozenset(
    {
        "job_type",
        "job_type_unavailable",
        "webhooks_disabled",
        "webhook_address",
        # only the catalog (GPU_CLASSES) decides whether a class exists and meets a need
        "gpu_class_unknown",
        "gpu_class_not_allowed",
        "gpu_need_unmet",
        # a count of cards: its type's range, the fleet's hosts, the account's max_running
        "gpus_out_of_range",
        "gpus_no_host",
        "gpus_over_max_running",
    }
)
OVER_THE_LIMIT = "duration_s must be at most "
#: A job whose GPU-seconds pass its account's max_held_gpu_seconds (an admin's PATCH may set it).
OVER_HELD = "GPU-seconds pass the account's max_held_gpu_seconds"


def submit_refused_only_beyond_the_schema(
    ctx: Any, response: schemathesis.Response, case: schemathesis.Case
) -> None:
    """Positive data acceptance, for POST /enqueue-task: a 422 to a body the schema calls valid
    is about something the schema cannot say (the caller's account's limits among them), never
    a rule it could state (a webhook's form)."""
    if case.operation.label != "POST /enqueue-task" or response.status_code != 422:
        return
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return
    detail = response.json()["detail"]
    if isinstance(detail, str):
        assert detail.startswith(OVER_THE_LIMIT) or OVER_HELD in detail, (
            f"a valid body refused: {detail}"
        )
        return
    for error in detail:
        if error["loc"][:2] != ["body", "input"]:
            assert error["type"] in BEYOND_THE_SCHEMA, f"a valid body refused: {error}"


@schemathesis.serializer("application/gzip")
def _gzip(ctx: Any, value: Any) -> bytes:
    """POST /code's raw body (a .tar.gz, as the schema says: any bytes), sent as generated."""
    return value if isinstance(value, bytes) else str(value).encode()


class LiveApp:
    """The ASGI app Schemathesis calls: it forwards to the app the current test opened."""

    def __init__(self) -> None:
        self.app: FastAPI | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.app is not None, "no app is open: use the `live` fixture"
        await self.app(scope, receive, send)


LIVE = LiveApp()
#: The whole schema, admin operations included, as an admin reads it at /admin/openapi.json.
SERVED = whole_schema(schema_app())


def load(document: dict[str, Any]) -> Any:
    """A Schemathesis schema of `document` that calls LIVE, bounded and deterministic."""
    schema = schemathesis.openapi.from_dict(copy.deepcopy(document))
    schema.app = LIVE
    schema.config.update(request_timeout=REQUEST_TIMEOUT_S)
    schema.config.generation.update(
        max_examples=MAX_EXAMPLES,
        deterministic=True,  # the same cases on every run: a failure in CI fails locally too
        database="none",  # and nothing remembered between runs
        # The key is the test's to give (or withhold), not a generated value's.
        with_security_parameters=False,
    )
    if support.unit_tier:
        # The coverage phase builds its boundary cases at collection, in every process, and the
        # webhook URL's (a pattern, 1 to 2048 characters) alone took some 90 s there: the unit
        # tier fuzzes without it; CI's whole run keeps it.
        schema.config.phases.coverage.enabled = False
    return schema


schema = load(SERVED)
#: The app lives for a whole test, across its generated cases (each case empties Redis first, so
#: that a case replayed while shrinking meets the state it met the first time): Hypothesis is
#: told that this function-scoped fixture is shared on purpose.
SHARED_APP = hypothesis.settings(
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def live(settings: Settings, r: redis.Redis) -> Iterator[redis.Redis]:
    """The real app on this test's Redis, behind LIVE, and a client on that Redis; the app's
    lifespan is ended afterwards.

    One key fires hundreds of requests a second here, so the per-key rate limit is lifted: it
    would answer most of them 429 and leave the handlers untried (tests/api/test_limits.py
    covers it)."""
    with APPS.lend(settings.model_copy(update={"rate_limit_per_s": 0})) as app:
        LIVE.app = app
        try:
            yield r
        finally:
            asgi.shutdown_lifespans()
            LIVE.app = None


@contextlib.contextmanager
def client_of(fuzzed: Any) -> Iterator[asgi.ASGIClient]:
    """One in-process client for a whole test, where Schemathesis would make one per request:
    a new requests Session each time read the proxy variables of the environment, a third of the
    time a request took (proxies mean nothing to an app called in-process). It reads as many
    events of a stream as the fuzzed schema says."""
    events = fuzzed.config.max_stream_events_for()
    with asgi.get_client(LIVE, max_stream_events=events) as client:
        client.trust_env = False
        yield client


@pytest.fixture
def session(live: redis.Redis) -> Iterator[asgi.ASGIClient]:
    with client_of(schema) as client:
        yield client


def fresh(live: redis.Redis) -> None:
    """An empty Redis, and only the users file's accounts and keys (a case may have disabled an
    account or revoked a key), so that a replayed case meets the state it met the first time."""
    live.flushdb()
    assert LIVE.app is not None
    runtime: Runtime = LIVE.app.state.runtime
    empty_test_database()
    runtime.ledger.accounts.seed(Accounts.load(runtime.settings.users_file).all())
    # Held in place of any reread still under way (one heard of a change a case made, which
    # could otherwise land during the next case with the accounts as that case left them).
    runtime.accounts.put(runtime.ledger.accounts.snapshot())


def is_keyed(case: schemathesis.Case) -> bool:
    return bool(case.operation.definition.raw.get("security"))


@pytest.mark.anyio
async def test_the_fuzzed_schema_is_the_one_the_app_serves(api: Api) -> None:
    response = await api.client.get("/admin/openapi.json", headers=KEY)

    assert response.status_code == 200
    assert response.json() == SERVED


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/health", "/openapi.json", "/docs"])
async def test_the_public_paths_answer_without_a_key(api: Api, path: str) -> None:
    response = await api.client.get(path)

    assert response.status_code == 200


def test_only_health_and_metrics_are_public_in_the_schema() -> None:
    """The 401 test below takes every operation with a security requirement as keyed: one added
    without a requirement would be left out of it, so it must be added here on purpose."""
    public = [
        (method, path)
        for path, operations in SERVED["paths"].items()
        for method, operation in operations.items()
        if not operation.get("security")
    ]
    assert public == [("get", "/health"), ("get", "/metrics")]


@schema.parametrize()
@SHARED_APP
def test_no_answer_is_a_5xx_or_undocumented_and_a_bad_key_is_refused(
    case: schemathesis.Case, live: redis.Redis, session: asgi.ASGIClient
) -> None:
    """Each generated request is sent with the key, where every built-in check applies (no 5xx;
    the status, content type, headers and body as documented; invalid input refused with a 4xx,
    valid input accepted; other methods 405), then without a key and with a wrong one. One test
    for both, since generating a request costs about as much as sending it."""
    fresh(live)  # each case on an empty Redis: a replayed case meets the same state
    case.call_and_validate(
        headers=KEY,
        session=session,
        additional_checks=[submit_refused_only_beyond_the_schema],
        excluded_checks=NOT_APPLICABLE.get(case.operation.label),
    )
    refused_without_a_valid_key(case, session)


def refused_without_a_valid_key(case: schemathesis.Case, session: asgi.ASGIClient) -> None:
    """The request without a key and with a wrong one: 401 for a keyed operation (404 under
    /admin, as if it were not there), 200 for a public one; documented either way."""
    if case.method.upper() != case.operation.method.upper():
        return  # a method the path does not serve: 405, whoever asks (checked with the key)
    for headers in ({}, WRONG_KEY):
        response = case.call(headers=headers, session=session)

        case.validate_response(
            response,
            checks=[
                checks.not_a_server_error,
                checks.status_code_conformance,
                checks.content_type_conformance,
                checks.response_headers_conformance,
                checks.response_schema_conformance,
            ],
            headers=headers,
        )
        if not is_keyed(case):
            assert response.status_code == 200, response.text  # /health and /metrics are public
            continue
        if case.path.startswith("/admin/"):  # hidden from all but admins, as if not there
            assert response.status_code == 404, (headers, response.status_code, response.text)
            assert response.json() == {"detail": "Not Found"}
            continue
        assert response.status_code == 401, (headers, response.status_code, response.text)
        assert response.json() == UNAUTHORIZED


# -- stateful: the jobs the requests create ------------------------------------------------------
def with_links(document: dict[str, Any]) -> dict[str, Any]:
    """The document, with OpenAPI links from an accepted job to every operation on its id, so
    that Schemathesis follows a created job through status, stream and cancel (random ids only
    ever meet the 404)."""
    linked = copy.deepcopy(document)
    to_task = {
        f"{method}-{path}": {
            "operationId": operation["operationId"],
            "parameters": {"task_id": "$response.body#/task_id"},
        }
        for path, operations in linked["paths"].items()
        if "{task_id}" in path
        for method, operation in operations.items()
    }
    linked["paths"]["/enqueue-task"]["post"]["responses"]["200"]["links"] = to_task
    return linked


def test_jobs_followed_from_enqueue_get_documented_answers(live: redis.Redis) -> None:
    """Sequences of calls: enqueue, then status, stream and cancel of the job it made, each
    answer checked as above (including that it is refused without the key)."""
    stateful = load(with_links(SERVED))
    # A queued job's stream stays open: its first event is enough to check it.
    stateful.config.max_stream_events = 1

    class Keyed(stateful.as_state_machine()):
        """Every call carries the key, and the checks know it is the caller's own."""

        def setup(self) -> None:
            fresh(live)  # each sequence on an empty Redis: a replayed one meets the same state

        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"headers": KEY, "session": session}

        def validate_response(
            self,
            response: schemathesis.Response,
            case: schemathesis.Case,
            additional_checks: Any = None,
            **kwargs: Any,
        ) -> None:
            case.validate_response(
                response,
                headers=KEY,
                additional_checks=[
                    *(additional_checks or []),
                    submit_refused_only_beyond_the_schema,
                ],
                # DELETE /tasks/{id} cancels a job, which stays readable (ended REVOKED)
                excluded_checks=[
                    *NOT_APPLICABLE.get(case.operation.label, []),
                    checks.use_after_free,
                ],
                transport_kwargs=kwargs,
                recorder=self.recorder,
            )

    with client_of(stateful) as session:
        Keyed.run(
            settings=hypothesis.settings(
                max_examples=STATEFUL_EXAMPLES,
                stateful_step_count=10,
                derandomize=True,
                database=None,
                deadline=None,
            )
        )
