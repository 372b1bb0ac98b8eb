"""What a job leaves besides its status: its log lines, the list of its artifacts and each
artifact's file, to its owner only.

Built per app (`build`), since the largest `tail` the schema allows is the MAX_LOG_LINES setting.
No `from __future__ import annotations` here: FastAPI must see that bound in the annotation of a
function defined inside `build`, which a string annotation could not name.
"""

import asyncio
import mimetypes
from collections.abc import AsyncIterator
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import StreamingResponse
from starlette.convertors import Convertor, register_url_convertor

from app.api.deps import CallerDep, RuntimeDep, TaskIdDep
from app.api.responses import ERRORS, NOT_YOURS, owned_job
from app.api.routing import KeyedRoute
from app.artifacts import ArtifactFile, BadNameError, check_name
from app.models import Artifact, ErrorBody, TaskLogs
from app.settings import Settings

NO_ARTIFACT = "artifact not found"
#: Bytes read per step of a download, each in a worker thread (an S3 read blocks).
CHUNK_BYTES = 256 * 1024
FALLBACK_TYPE = "application/octet-stream"

ARTIFACT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    200: {
        "description": "the file, as an attachment; its Content-Type guessed from the name "
        "(application/octet-stream when it cannot be)",
        "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
    },
    404: {
        "model": ErrorBody,
        "description": "no such task, or not the caller's; or no artifact of that name (a name "
        "that would leave the job's folder names none)",
    },
}


def build(settings: Settings) -> APIRouter:
    """The routes, with `tail` bounded by this app's MAX_LOG_LINES."""
    router = APIRouter(tags=["jobs"], route_class=KeyedRoute)
    tail_query = Query(
        ge=1,
        le=settings.max_log_lines,
        description="only the last N lines; by default all that are kept (the newest "
        "MAX_LOG_LINES)",
    )

    @router.get(
        "/tasks/{task_id}/logs",
        response_model=TaskLogs,
        responses={
            **ERRORS,
            **NOT_YOURS,
            422: {"model": ErrorBody, "description": "a tail outside 1 to MAX_LOG_LINES"},
        },
    )
    async def task_logs(
        task_id: TaskIdDep,
        caller: CallerDep,
        runtime: RuntimeDep,
        tail: Annotated[int, tail_query] = settings.max_log_lines,
    ) -> TaskLogs:
        """The job's log lines (stdout, stderr and its log calls), oldest first: the newest
        MAX_LOG_LINES are kept, as long as the job's record."""
        await owned_job(runtime, caller.account, task_id)
        lines = await runtime.store.logs(task_id, tail)
        return TaskLogs(lines=lines)

    @router.get(
        "/tasks/{task_id}/artifacts",
        response_model=list[Artifact],
        responses={**ERRORS, **NOT_YOURS},
    )
    async def task_artifacts(
        task_id: TaskIdDep, caller: CallerDep, runtime: RuntimeDep
    ) -> list[Artifact]:
        """The files the job left, as its status's `result.artifacts` lists them (name, size,
        SHA-256): empty until it has ended SUCCESS, and for a success that left none."""
        job = await owned_job(runtime, caller.account, task_id)
        result = job.status_view().result
        return (result.artifacts if result is not None else None) or []

    @router.get(
        "/tasks/{task_id}/artifacts/{name:anypath}",
        response_class=StreamingResponse,
        responses=ARTIFACT_RESPONSES,
    )
    async def task_artifact(
        task_id: TaskIdDep, name: str, caller: CallerDep, runtime: RuntimeDep
    ) -> StreamingResponse:
        """Download one of the files the job left (`result.artifacts` lists them); a name may
        have folders, e.g. plots/loss.png."""
        await owned_job(runtime, caller.account, task_id)
        try:
            opened = await asyncio.to_thread(runtime.artifacts.open, task_id, check_name(name))
        except (BadNameError, FileNotFoundError):
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail=NO_ARTIFACT) from None
        return StreamingResponse(_chunks(opened), headers=download_headers(name))

    return router


class _AnyPath(Convertor[str]):
    """Starlette's `path`, newlines included: a name that decodes to one (`%0A`) must reach the
    route, where a missing key is a 401 and a bad name a 404, not be a routing 404 before the
    key is checked."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("anypath", _AnyPath())


async def _chunks(opened: ArtifactFile) -> AsyncIterator[bytes]:
    """The file's content, read in a thread a chunk at a time: never on the event loop."""
    try:
        while chunk := await asyncio.to_thread(opened.read, CHUNK_BYTES):
            yield chunk
    finally:
        opened.close()  # quick either way; an await here would be cancelled with the download


def download_headers(name: str) -> dict[str, str]:
    """Content-Type from the name, and Content-Disposition: attachment with its base name.

    The type is left without a charset (the file's encoding is unknown); a compressed name
    (x.csv.gz) is octet-stream, as no Content-Encoding is sent. nosniff: an HTML artifact is
    never rendered as a page of the API's origin."""
    guessed, encoding = mimetypes.guess_type(name, strict=False)
    media_type = guessed if guessed and encoding is None else FALLBACK_TYPE
    return {
        "content-type": media_type,
        "content-disposition": _attachment(name.rsplit("/", 1)[-1]),
        "x-content-type-options": "nosniff",
    }


def _attachment(filename: str) -> str:
    """RFC 6266: a plain ASCII name quoted, any other as RFC 5987's UTF-8 percent-encoding."""
    if filename.isascii() and '"' not in filename:
        return f'attachment; filename="{filename}"'
    return f"attachment; filename*=UTF-8''{quote(filename, safe='')}"
