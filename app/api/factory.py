"""create_app: the routers, middleware and error handlers of the API for one set of settings."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from redis.exceptions import RedisError
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from app.api import schema
from app.api.fast_submit import SubmitFastPath
from app.api.limits import BodyLimit, ErrorRate
from app.api.responses import OrjsonResponse, json_error
from app.api.routes import (
    accounts,
    admin,
    bills,
    code,
    dashboard,
    health,
    job_types,
    jobs,
    metrics,
    outputs,
    stream,
    tasks,
)
from app.api.runtime import Runtime
from app.errors import transient
from app.models import BODY_SHAPES
from app.settings import Settings

log = logging.getLogger(__name__)


def create_app(settings: Settings, *, submit_fast_path: bool = True) -> FastAPI:
    """The API for these settings; Redis is reached when the first request needs it. Without
    submit_fast_path, every submit goes through its FastAPI route (app/api/fast_submit.py)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = Runtime.open(settings)
        app.state.runtime = runtime
        await runtime.start()
        try:
            yield
        finally:
            await runtime.close()

    app = FastAPI(
        title="fairgpu",
        version="0.1.0",
        summary="Fair GPU job scheduling: per-account fair queues on Redis, run by Celery workers.",
        lifespan=lifespan,
        default_response_class=OrjsonResponse,
    )
    wider = {code.PATH: settings.max_code_bytes}  # an upload's own bound, in its route too
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, wider=wider)
    app.add_middleware(ErrorRate)  # outside BodyLimit, to count its 413s too
    if submit_fast_path:
        app.add_middleware(SubmitFastPath, api=app, max_bytes=settings.max_body_bytes)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(RedisError, _redis_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(OSError, _redis_error)
    app.add_exception_handler(SQLAlchemyError, _database_error)
    routers = (jobs, stream, job_types, tasks, bills, health, metrics, admin, accounts, dashboard)
    for module in routers:
        if module is tasks:
            app.include_router(accounts.own)  # GET /account, where it always stood
        app.include_router(module.router)
    app.include_router(outputs.build(settings))
    app.include_router(code.router)
    app.openapi = lambda: schema.public(app)  # type: ignore[method-assign]
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, StarletteHTTPException) and exc.status_code == 405:
        # Starlette names the methods of the first route on the path only; a path served by
        # several routes (GET and POST /admin/accounts) allows all of theirs.
        exc = StarletteHTTPException(405, exc.detail, headers={"Allow": _allowed(request)})
    if request.url.path.startswith(admin.router.prefix + "/"):
        return await admin.hide_wrong_methods(request, exc)
    return await json_error(request, exc)


async def _database_error(request: Request, exc: Exception) -> OrjsonResponse:
    """503 with Retry-After while the SQL database cannot be reached (accounts' changes, bills,
    usage: submits and statuses need Redis only); any other database failure is a 500."""
    away = isinstance(exc, OperationalError | InterfaceError)
    detail = "the accounts and billing database is unavailable; retry shortly"
    return _failed(request, exc, "the database", away, detail)


def _allowed(request: Request) -> str:
    """The methods that the routes on the request's path serve, for a 405's Allow header."""
    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, Route) and route.methods:
            match, _ = route.matches(request.scope)
            if match is not Match.NONE:
                methods |= route.methods
    return ", ".join(sorted(methods))


async def _invalid_request(request: Request, exc: Exception) -> OrjsonResponse:
    """422 listing what is wrong, without echoing the input back: it may be huge, or not even
    representable in JSON (NaN, Infinity)."""
    assert isinstance(exc, RequestValidationError)
    errors = [{"type": e["type"], "loc": _field(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
    return OrjsonResponse({"detail": errors}, status_code=422)


def _field(loc: Sequence[str | int]) -> list[str | int]:
    """Where an error is, without the name of the body's shape that pydantic puts after "body"
    for a union (POST /enqueue-task's two bodies): the client wants the field."""
    if len(loc) > 1 and loc[0] == "body" and loc[1] in BODY_SHAPES:
        return ["body", *loc[2:]]
    return list(loc)


async def _redis_error(request: Request, exc: Exception) -> OrjsonResponse:
    """503 with Retry-After while Redis is away or in a transient state (app/errors.py); any
    other failure of Redis (a bug in a script, a wrong type) is a 500, logged in full."""
    detail = "the job store is unavailable; retry shortly"
    return _failed(request, exc, "Redis", transient(exc), detail)


def _failed(request: Request, exc: Exception, what: str, away: bool, detail: str) -> OrjsonResponse:
    """The answer to a failure of a store: 503 with Retry-After while it is away (a warning),
    else a 500 (logged in full)."""
    if away:
        log.warning("%s %s: %s unavailable: %r", request.method, request.url.path, what, exc)
        return OrjsonResponse({"detail": detail}, status_code=503, headers={"Retry-After": "5"})
    log.error("%s %s: %s failed", request.method, request.url.path, what, exc_info=exc)
    return OrjsonResponse({"detail": "internal error"}, status_code=500)
