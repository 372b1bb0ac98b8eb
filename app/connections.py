"""Where every process gets its Redis connections: the one Redis of REDIS_URL, or, when
REDIS_SENTINELS names Redis Sentinels, the primary they elect for REDIS_SENTINEL_MASTER.

Under Sentinel a connection asks the Sentinels for the primary when it connects, and again
after the primary is lost (redis-py's Sentinel clients), so the API, the workers, Beat, the
event hub and the fair queues follow a failover by themselves; Celery's broker does the same
through Kombu's `sentinel://` transport. REDIS_URL still gives the database number and the
primary's password. Redis Cluster is not supported: Kombu's Redis transport cannot use it
(docs/operations.md).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.connection import HiredisRespSerializer
from redis.sentinel import Sentinel

from app.settings import Settings


def _primary(settings: Settings) -> tuple[int, str | None]:
    """The database number and the primary's password, from REDIS_URL."""
    url = urlsplit(settings.redis_url)
    path = url.path.lstrip("/")
    return (int(path) if path.isdigit() else 0), url.password


def _sentinel_kwargs(settings: Settings) -> dict[str, Any]:
    secret = settings.redis_sentinel_password
    return {} if secret is None else {"password": secret.get_secret_value()}


def sync_client(settings: Settings, **options: Any) -> redis.Redis:
    """A blocking client on the Redis the settings name (its primary, under Sentinel)."""
    if not settings.redis_sentinels:
        return redis.Redis.from_url(settings.redis_url, **options)
    db, password = _primary(settings)
    # redis-py's Sentinel classes carry no annotations
    sentinel = Sentinel(settings.sentinels, sentinel_kwargs=_sentinel_kwargs(settings))  # type: ignore[no-untyped-call]
    master: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        settings.redis_sentinel_master, db=db, password=password, **options
    )
    return master


def async_client(settings: Settings, **options: Any) -> aioredis.Redis:
    """An asyncio client on the Redis the settings name (its primary, under Sentinel)."""
    if not settings.redis_sentinels:
        return hiredis_packed(aioredis.Redis.from_url(settings.redis_url, **options))
    db, password = _primary(settings)
    sentinel = AsyncSentinel(settings.sentinels, sentinel_kwargs=_sentinel_kwargs(settings))  # type: ignore[no-untyped-call]
    master: aioredis.Redis = sentinel.master_for(
        settings.redis_sentinel_master, db=db, password=password, **options
    )
    return hiredis_packed(master)


def async_pooled(
    settings: Settings, max_connections: int, wait_s: float, **options: Any
) -> aioredis.Redis:
    """An asyncio client whose calls share at most max_connections connections, a call
    waiting up to wait_s for one (Sentinel's pool does not wait: a burst above the bound is
    refused at once, a 503)."""
    if settings.redis_sentinels:
        return async_client(settings, max_connections=max_connections, **options)
    pool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=max_connections, timeout=wait_s, **options
    )
    return hiredis_packed(aioredis.Redis.from_pool(pool))


class _HiredisPacking:
    """Commands written by hiredis's packer, as redis-py's blocking client writes them; its
    asyncio client writes them in Python: some 40 µs for a submit's call of 42 arguments,
    against 4 (docs/benchmarks.md). A float is written as repr() writes it, as redis-py's own
    encoder does (hiredis would write 0.1 + 0.2 with another last digit)."""

    _packer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        """The command in the Redis protocol; DataError for an argument of another type."""
        written = (repr(a) if isinstance(a, float) else a for a in args)
        packed: list[bytes] = self._packer.pack(*written)  # type: ignore[arg-type]  # mistyped
        return packed


#: Each connection class, with the packing: made once per class (a pool's class is one of few).
_PACKING: dict[type[Any], type[Any]] = {}


def hiredis_packed(client: aioredis.Redis) -> aioredis.Redis:
    """The client, its pool's new connections packing commands with hiredis (unless it encodes
    text other than as UTF-8, hiredis's only way)."""
    pool = client.connection_pool
    plain = pool.connection_class
    if pool.connection_kwargs.get("encoding", "utf-8").lower() not in ("utf-8", "utf8"):
        return client
    if plain not in _PACKING:
        _PACKING[plain] = type(plain.__name__, (_HiredisPacking, plain), {})
    pool.connection_class = _PACKING[plain]
    return client


def broker(settings: Settings) -> tuple[str, dict[str, Any]]:
    """Celery's broker URL and the transport options it needs: CELERY_BROKER_URL where set
    (RabbitMQ), else Kombu's Redis transport on REDIS_URL, or its Sentinel transport on every
    Sentinel."""
    if settings.celery_broker_url:
        return settings.celery_broker_url, {}
    if not settings.redis_sentinels:
        return settings.redis_url, {}
    db, password = _primary(settings)
    auth = "" if password is None else f":{quote(password, safe='')}@"
    url = ";".join(f"sentinel://{auth}{host}:{port}/{db}" for host, port in settings.sentinels)
    options = {"master_name": settings.redis_sentinel_master}
    return url, {**options, "sentinel_kwargs": _sentinel_kwargs(settings)}
