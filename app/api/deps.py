"""The handlers' dependencies, as short Annotated aliases."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security, status
from fastapi.security import APIKeyHeader

from app.api.runtime import Runtime
from app.auth import Account

api_key_header = APIKeyHeader(
    name="X-API-Key", auto_error=False, description="An API key from the accounts file"
)
NOT_FOUND = "task not found"


def get_runtime(request: Request) -> Runtime:
    """The process's Runtime, opened by the app's lifespan."""
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def current_account(
    runtime: RuntimeDep, key: Annotated[str | None, Security(api_key_header)]
) -> Account:
    """The account whose key came in X-API-Key; 401 when it is missing or unknown."""
    account = runtime.accounts.authenticate(key)
    if account is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="missing or invalid API key (header X-API-Key)",
            headers={"WWW-Authenticate": "ApiKey"},
        )
    return account


AccountDep = Annotated[Account, Depends(current_account)]


def valid_task_id(task_id: str) -> str:
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
