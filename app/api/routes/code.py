"""Code an account uploads to run as script jobs (docs/scripts.md): POST /code takes a project's
.tar.gz as the raw body, checks it whole (app/code/archive.py) and keeps it by its SHA-256
(app/code/store.py); GET /code/{code_id} tells its owner what it holds. Only an account whose
record says run_scripts may upload; any other account's code is, to the caller, unknown.

The body goes to a temporary file as it arrives, bounded by MAX_CODE_BYTES (the API's small
body limit, MAX_BODY_BYTES, is widened for this path alone in app/api/factory.py), and the file
is gone when the request ends, whatever its answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response, status
from pydantic import BaseModel, Field
from starlette.requests import ClientDisconnect

from app.api.deps import CallerDep, RuntimeDep
from app.api.responses import ERRORS
from app.api.routing import KeyedRoute
from app.api.runtime import Runtime
from app.artifacts import ArtifactStore
from app.code.archive import BadArchiveError, Bounds, check
from app.code.store import AREA, CodeStore, OverAccountBoundError
from app.models import ErrorBody

router = APIRouter(tags=["code"], route_class=KeyedRoute)
PATH = "/code"
GZIP_TYPES = frozenset({"application/gzip", "application/x-gzip"})
NO_CODE = "code not found"
NOT_ALLOWED = (
    "this account may not upload code: its record does not say run_scripts: true (an admin sets it)"
)
#: Bytes gathered before each write to the temporary file, done in a thread.
WRITE_BYTES = 1 << 20
SHA256 = Field(pattern=r"^[0-9a-f]{64}$", description="the archive's SHA-256, in hex")


class CodeUploaded(BaseModel):
    """An upload's answer: the id to run it by, and its size as sent."""

    code_id: str = SHA256
    bytes: int = Field(description="the archive's size, as sent")


class CodeInfo(CodeUploaded):
    """What its owner is told of its code."""

    uploaded_at: float = Field(description="when the account first uploaded it (Unix seconds)")


UPLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    200: {"model": CodeUploaded, "description": "the account had this code already"},
    403: {"model": ErrorBody, "description": "the account may not run scripts (run_scripts)"},
    413: {
        "model": ErrorBody,
        "description": "over MAX_CODE_BYTES, or the account's stored code would pass "
        "MAX_CODE_BYTES_PER_ACCOUNT; nothing is kept",
    },
    415: {"model": ErrorBody, "description": "the body is not declared application/gzip"},
    422: {
        "model": ErrorBody,
        "description": "not a .tar.gz, a member a project may not hold (named), or over the "
        "bounds on members or unpacked bytes; nothing is kept",
    },
}


def code_store(runtime: Runtime) -> CodeStore:
    """The store of uploaded code: within the artifacts' own, on the API's Redis."""
    blobs: ArtifactStore = runtime.artifacts.within(AREA)
    return CodeStore(blobs, runtime.redis)


@router.post(
    PATH,
    status_code=status.HTTP_201_CREATED,
    response_model=CodeUploaded,
    responses=UPLOAD_RESPONSES,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def upload_code(
    request: Request, response: Response, caller: CallerDep, runtime: RuntimeDep
) -> CodeUploaded:
    """Upload a project (a .tar.gz, the raw body) to run as script jobs: 201 when it is new to
    the account, 200 when the account had it already; the same bytes are stored once, whoever
    uploads them."""
    account = caller.account
    if not account.run_scripts:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=NOT_ALLOWED)
    given = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if given not in GZIP_TYPES:
        detail = f"the body must be a .tar.gz with Content-Type: application/gzip (got {given!r})"
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, detail=detail)
    settings = runtime.settings
    with tempfile.TemporaryDirectory(prefix="fairgpu-code-") as folder:
        archive = Path(folder) / "upload.tar.gz"
        code_id, size = await _receive(request, archive, settings.max_code_bytes)
        bounds = Bounds(settings.max_code_members, settings.max_code_unpacked_bytes)
        try:
            await asyncio.to_thread(check, archive, bounds)
        except BadArchiveError as exc:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=str(exc)) from None
        most = settings.max_code_bytes_per_account
        try:
            new = await code_store(runtime).add(account.user_id, code_id, archive, most)
        except OverAccountBoundError:
            detail = f"the account's stored code would pass {most} bytes"
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, detail=detail) from None
    if not new:
        response.status_code = status.HTTP_200_OK
    return CodeUploaded(code_id=code_id, bytes=size)


async def _receive(request: Request, target: Path, most: int) -> tuple[str, int]:
    """Write the body to `target` as it comes, hashing it: (its SHA-256, its size); a 413 past
    `most` bytes."""
    digest = hashlib.sha256()
    size = 0
    pending = bytearray()
    with target.open("wb") as copy:
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > most:
                    detail = f"request body over {most} bytes"
                    raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, detail=detail)
                digest.update(chunk)
                pending += chunk
                if len(pending) >= WRITE_BYTES:
                    await asyncio.to_thread(copy.write, bytes(pending))
                    pending.clear()
        except ClientDisconnect:  # BodyLimit's 413 went out already; this answer is dropped
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE) from None
        copy.write(pending)
    return digest.hexdigest(), size


@router.get(
    f"{PATH}/{{code_id}}",
    response_model=CodeInfo,
    responses={
        **ERRORS,
        404: {"model": ErrorBody, "description": "no code of the caller's has this id"},
    },
)
async def get_code(code_id: str, caller: CallerDep, runtime: RuntimeDep) -> CodeInfo:
    """The caller's own code: its size and when it was uploaded. Another account's is, to the
    caller, unknown: the same 404."""
    found = await code_store(runtime).info(caller.account.user_id, code_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=NO_CODE)
    return CodeInfo(code_id=found.code_id, bytes=found.bytes, uploaded_at=found.uploaded_at)
