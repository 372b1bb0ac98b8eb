"""GET /metrics: the service's metrics in Prometheus's text format.

No key: Prometheus scrapes without one, and no metric carries an account, a job or a key (see
docs/security.md). The numbers are read from Redis in a thread, off the event loop.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.deps import RuntimeDep
from app.models import ErrorBody

router = APIRouter(tags=["operations"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"description": "Prometheus text format", "content": {CONTENT_TYPE_LATEST: {}}},
        503: {"model": ErrorBody, "description": "Redis is unreachable"},
    },
)
async def metrics(runtime: RuntimeDep) -> Response:
    """Queued and running jobs, finished jobs, wait and run times, billing, workers, fairness."""
    body = await asyncio.to_thread(generate_latest, runtime.metrics)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
