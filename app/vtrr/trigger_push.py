"""Triggers that the queue's own scripts push onto the broker's list (see VTRRQueue).

Two questions decide it, both answered once per process: is the broker Kombu's Redis transport
on the queue's own server and database, and what does one trigger look like there, byte for
byte, for the scripts to copy.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from celery import Celery, Task
from kombu import Connection
from redis import Redis

from app.vtrr.layout import TRIGGER_ID

log = logging.getLogger(__name__)


def broker_is(celery_app: Celery, client: Redis) -> bool:
    """Whether the app's broker is Kombu's Redis transport on the client's server and database,
    with no key prefix, so that a list the scripts push to is the list a worker reads."""
    conn = celery_app.connection_for_write()
    try:
        options = conn.transport_options or {}
        if conn.transport.driver_type != "redis" or options.get("global_keyprefix"):
            return False
        ours = client.connection_pool.connection_kwargs
        broker_db = int(conn.virtual_host) if conn.virtual_host.isdigit() else 0
        return (conn.hostname, conn.port or 6379, broker_db) == (
            ours.get("host"),
            ours.get("port"),
            ours.get("db", 0),
        )
    finally:
        conn.release()


def trigger_message(task: Task, celery_queue: str) -> str | None:  # type: ignore[type-arg]
    """One trigger of task as Kombu's Redis transport would store it, with TRIGGER_ID for its
    ids; None (the triggers are then published by Kombu) unless it is a plain message to the
    queue's own list.

    Sent through Kombu's in-memory transport, which builds the message with the same code as
    the Redis one, so it follows the installed Celery, Kombu and the app's settings.
    """
    try:
        with Connection("memory://") as conn:
            with conn.Producer() as producer:
                task.apply_async(queue=celery_queue, producer=producer, task_id=TRIGGER_ID)
            channel: Any = conn.default_channel
            # Kombu's channels have no public read of one message without a consumer: the
            # memory channel's own _get hands back the message as the transport stored it.
            message: dict[str, Any] = channel._get(celery_queue)
    except Exception:
        log.warning("queue %s: triggers are published by Kombu", celery_queue, exc_info=True)
        return None
    properties = message["properties"]
    direct = {"exchange": "", "routing_key": celery_queue}
    if properties.get("delivery_info") != direct or properties.get("priority"):
        # Routed through an exchange, or to a priority's own list: Kombu decides the list.
        return None
    properties["delivery_tag"] = TRIGGER_ID
    return json.dumps(message)
