"""Health: is Redis there, how many jobs wait in each queue, and how many workers take jobs (no
key needed)."""

from __future__ import annotations

from fastapi import APIRouter
from redis.exceptions import RedisError

from app.api.deps import RuntimeDep
from app.api.responses import OrjsonResponse
from app.api.runtime import Runtime
from app.models import Health
from app.store import workers as heartbeats
from app.store.keys import WORKERS

router = APIRouter(tags=["health"])


@router.get(
    "/health",
    response_model=Health,
    response_model_exclude_none=True,
    responses={503: {"model": Health, "description": "Redis is unreachable"}},
)
async def health(runtime: RuntimeDep) -> Health | OrjsonResponse:
    """200 with the queue lengths and the workers ready when Redis answers; 503 when it does
    not. No worker ready is still 200: the API itself serves, and probes restart the API only."""
    try:
        await runtime.redis.ping()
        queues = {kind: await q.length() for kind, q in runtime.queues.items()}
        ready = await workers_ready(runtime)
    except (RedisError, OSError) as exc:
        body = {
            "redis": f"unreachable: {type(exc).__name__}",
            "queues": {},
            "detail": "Redis does not answer; the service recovers by itself once it does",
        }
        return OrjsonResponse(body, status_code=503, headers={"Retry-After": "5"})
    return Health(redis="ok", queues=queues, workers_ready=ready)


async def workers_ready(runtime: Runtime) -> int:
    """How many workers' heartbeats are fresh and not broken (Redis's clock, as they are
    stamped)."""
    seconds, micros = await runtime.redis.time()
    seen = heartbeats.parse(await runtime.redis.hgetall(WORKERS))
    return len(heartbeats.ready(seen, seconds + micros / 1e6, runtime.settings.heartbeat_seconds))
