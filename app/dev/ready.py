"""When the dev stack takes jobs: once each of its workers' heartbeats is in Redis.

A worker writes its first heartbeat on Celery's `worker_ready`, after its warm child has started
and its consumer is in place (app/worker/main.py), so a job submitted then starts at once. The
API's /health counts the same heartbeats (`workers_ready`), whoever's workers they are; the
stack asks for its own workers by name, so that other workers on a shared Redis do not count.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import redis

from app import connections
from app.dev import processes
from app.settings import Settings
from app.store import workers as heartbeats
from app.store.keys import WORKERS


def ready_workers(settings: Settings) -> set[str]:
    """The names of the workers whose heartbeat is fresh and not broken (none while Redis does
    not answer)."""
    client = connections.sync_client(settings, socket_connect_timeout=1, socket_timeout=1)
    try:
        seconds, micros = client.time()
        seen = heartbeats.parse(client.hgetall(WORKERS))
    except (redis.RedisError, OSError):
        return set()
    finally:
        client.close()
    now = seconds + micros / 1e6
    return {w.name for w in heartbeats.ready(seen, now, settings.heartbeat_seconds)}


def wait_for_workers(
    settings: Settings,
    names: Collection[str],
    last_line_of: Callable[[str], str],
    timeout_s: float,
) -> None:
    """Wait until every named worker takes jobs; TimeoutError naming the first that does not,
    with the last line of its log (last_line_of(name))."""
    waiting: list[str] = []

    def all_ready() -> bool:
        ready = ready_workers(settings)
        waiting[:] = [name for name in names if name not in ready]
        return not waiting

    try:
        processes.wait_until(all_ready, timeout_s, "the workers", every=0.1)
    except TimeoutError:
        name = waiting[0]
        raise TimeoutError(
            f"worker {name} is not ready to take jobs after {timeout_s:g} s "
            f"(the last line of its log: {last_line_of(name)})"
        ) from None
