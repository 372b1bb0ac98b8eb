"""Every keyed endpoint is counted against its key's rate, and Redis failures map to 503 only
when a retry can help (app/errors.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator

import pytest
import redis
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader
from starlette.routing import BaseRoute

from app.api.factory import create_app
from app.api.routing import AdminRoute, KeyedRoute, counts_itself, counts_own_rate
from app.settings import Settings
from app.store.keys import job_key
from tests.api.conftest import Api
from tests.api.helpers import KEY, USERS_FILE

pytestmark = pytest.mark.anyio
OPEN_PATHS = {"/health", "/metrics", "/dashboard", "/dashboard/static/{name}"}
#: The endpoints that count the rate in their own Redis call (counts_own_rate), and the test
#: that proves each one does.
COUNTS_ITSELF = {"/enqueue-task": "tests/api/test_lean_submit.py"}


def api_routes(routes: Iterable[BaseRoute]) -> Iterator[APIRoute]:
    """Every endpoint of the app, looking inside the routers it includes."""
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI's included router
        if included is not None:
            yield from api_routes(included.routes)
        elif isinstance(route, APIRoute):
            yield route


def takes_a_key(dependant: Dependant) -> bool:
    """Whether the endpoint, or any dependency of it, reads the API key."""
    return isinstance(dependant.call, APIKeyHeader) or any(
        takes_a_key(sub) for sub in dependant.dependencies
    )


def test_every_route_that_takes_a_key_is_a_keyed_route_that_counts() -> None:
    routes = list(api_routes(create_app(Settings(users_file=USERS_FILE)).routes))
    keyed = [route for route in routes if takes_a_key(route.dependant)]
    assert {route.path for route in routes if route not in keyed} == OPEN_PATHS
    for route in keyed:
        assert isinstance(route, KeyedRoute), route.path
        if counts_itself(route.endpoint):
            continue  # declared, and listed below
        # FastAPI calls the counting wrapper, not the module's function itself.
        assert getattr(route.endpoint, "__wrapped__", None) is not None, route.path
    assert {route.path for route in keyed if counts_itself(route.endpoint)} == set(COUNTS_ITSELF)
    admin = {route.path for route in keyed if isinstance(route, AdminRoute)}
    assert admin == {route.path for route in keyed if route.path.startswith("/admin/")}
    assert admin


async def test_a_served_request_counts_once_against_its_key(api: Api, r: redis.Redis) -> None:
    assert (await api.client.get("/account", headers=KEY)).status_code == 200
    counters = [k for k in r.keys("fairgpu:rate:*")]
    assert len(counters) == 1
    assert r.get(counters[0]) == b"1"


async def test_a_script_or_type_error_in_redis_is_a_500_not_a_retry(
    api: Api, r: redis.Redis
) -> None:
    task_id = str(uuid.uuid4())
    r.set(job_key(task_id), "not a hash")  # WRONGTYPE: no retry makes this work

    response = await api.client.get(f"/task-status/{task_id}", headers=KEY)

    assert response.status_code == 500
    assert response.json() == {"detail": "internal error"}
    assert "retry-after" not in response.headers


def test_a_plain_def_endpoint_is_refused_when_the_route_is_made() -> None:
    def blocking() -> None:
        """Would run on the event loop if the counting wrapper awaited it."""

    with pytest.raises(TypeError, match="async def"):
        KeyedRoute("/blocking", blocking)
    with pytest.raises(TypeError, match="async def"):
        KeyedRoute("/blocking", counts_own_rate(blocking))


def test_only_the_declaration_spares_an_endpoint_the_counting_wrapper() -> None:
    async def plain() -> None:
        """Counted by the route."""

    async def own() -> None:
        """Counts in its own Redis call."""

    counted = KeyedRoute("/plain", plain).endpoint
    assert getattr(counted, "__wrapped__", None) is plain
    declared = counts_own_rate(own)
    marked = KeyedRoute("/own", declared).endpoint  # only noted as counted, for ErrorRate
    assert getattr(marked, "__wrapped__", None) is declared
    assert marked.__code__ is not counted.__code__
    assert counts_itself(declared) and not counts_itself(plain)
