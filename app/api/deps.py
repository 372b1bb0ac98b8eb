"""The handlers' dependencies, as short Annotated aliases."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security, status
from fastapi.security import APIKeyHeader

from app.api.routing import Caller
from app.api.runtime import Runtime

api_key_header = APIKeyHeader(
    name="X-API-Key",
    auto_error=False,
    description="An account's API key, issued by an admin or seeded from the accounts file",
)
NOT_FOUND = "task not found"


# The dependencies are `async def` although they never wait: FastAPI runs a plain `def` one in its
# thread pool, which costs more than the work itself on every request.
async def get_runtime(request: Request) -> Runtime:
    """The process's Runtime, opened by the app's lifespan."""
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def current_caller(
    request: Request, key: Annotated[str | None, Security(api_key_header)]
) -> Caller:
    """The caller that the route class authenticated (the key parameter documents the header
    in the schema; it is not checked a second time)."""
    caller: Caller = request.state.caller
    return caller


CallerDep = Annotated[Caller, Depends(current_caller)]


async def valid_task_id(task_id: str) -> str:
    """A task id is a UUID in its canonical form; anything else is the same 404 as an unknown id,
    given before Redis is touched."""
    try:
        canonical = str(uuid.UUID(task_id))
    except ValueError:
        canonical = ""
    if canonical != task_id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=NOT_FOUND)
    return task_id


TaskIdDep = Annotated[str, Depends(valid_task_id)]
