"""The handlers' dependencies, as short Annotated aliases."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security, status
from fastapi.security import APIKeyHeader

from app.api.routing import unauthorized
from app.api.runtime import Runtime
from app.auth import Account, digest

api_key_header = APIKeyHeader(
    name="X-API-Key", auto_error=False, description="An API key from the accounts file"
)
NOT_FOUND = "task not found"


# The dependencies are `async def` although they never wait: FastAPI runs a plain `def` one in its
# thread pool, which costs more than the work itself on every request.
async def get_runtime(request: Request) -> Runtime:
    """The process's Runtime, opened by the app's lifespan."""
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


@dataclass(frozen=True)
class Caller:
    """Who is calling: the account, and which of its keys (by digest) was used."""

    account: Account
    key_digest: str

    async def spend(self, runtime: Runtime) -> None:
        """Count one request against this key's rate; 429 with Retry-After past the limit.

        Handlers call it once the request has passed validation, so a rejected request writes
        nothing to Redis.
        """
        retry_after = await runtime.limiter.spend(self.key_digest)
        if retry_after is not None:
            raise HTTPException(
                status.HTTP_429_TOO_MANY_REQUESTS,
                detail=f"more than {runtime.limiter.per_second} requests a second with this key",
                headers={"Retry-After": str(retry_after)},
            )


async def current_caller(
    runtime: RuntimeDep, key: Annotated[str | None, Security(api_key_header)]
) -> Caller:
    """The account whose key came in X-API-Key; 401 when it is missing or unknown."""
    account = runtime.accounts.authenticate(key)
    if account is None:
        raise unauthorized()
    return Caller(account, digest(key or ""))


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
