"""Health: is Redis there, and how many jobs wait in each queue (no key needed)."""

from __future__ import annotations

from fastapi import APIRouter
from redis.exceptions import RedisError

from app.api.deps import RuntimeDep
from app.api.responses import OrjsonResponse
from app.models import Health

router = APIRouter(tags=["health"])


@router.get(
    "/health",
    response_model=Health,
    response_model_exclude_none=True,
    responses={503: {"model": Health, "description": "Redis is unreachable"}},
)
async def health(runtime: RuntimeDep) -> Health | OrjsonResponse:
    """200 with the queue lengths when Redis answers; 503 when it does not."""
    try:
        await runtime.redis.ping()
        queues = {kind: await q.length() for kind, q in runtime.queues.items()}
    except (RedisError, OSError) as exc:
        body = {
            "redis": f"unreachable: {type(exc).__name__}",
            "queues": {},
            "detail": "Redis does not answer; the service recovers by itself once it does",
        }
        return OrjsonResponse(body, status_code=503, headers={"Retry-After": "5"})
    return Health(redis="ok", queues=queues)
