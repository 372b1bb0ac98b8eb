"""The Celery app, and every reliability setting of it in one place.

Celery is a thin transport here: a message only wakes a worker (a payload-less trigger); the
job itself waits in the fair queue, leased while it runs. The settings below say how.
"""

from __future__ import annotations

from celery import Celery

from app import connections
from app.models import KINDS, RECLAIM_QUEUE
from app.settings import Settings


def create_celery(settings: Settings) -> Celery:
    """A Celery app whose broker is the same Redis as the state (its Sentinels' primary under
    Sentinel: app/connections.py)."""
    url, transport = connections.broker(settings)
    app = Celery("fairgpu", broker=url, set_as_current=False)
    app.conf.update(
        # One job at a time per worker, and a worker takes only the message it is about to run:
        # a short job never waits reserved behind a long one on a busy worker.
        worker_concurrency=1,
        worker_prefetch_multiplier=1,
        # Acknowledge a trigger when its job ends, and put it back if the worker process dies.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # Longer than the longest job: a running job's trigger is never handed to a second
        # worker (see Settings.broker_visibility_s).
        broker_transport_options={
            "visibility_timeout": settings.broker_visibility_s,
            **transport,
        },
        # JSON only: a pickled message from anyone who can reach the broker would run code.
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        # Results and states live in the job records, not in a Celery result backend.
        task_ignore_result=True,
        task_store_errors_even_if_ignored=False,
        # No task events unless someone watches: they cost a publish per task in the gap between
        # two jobs. Flower switches them on in the workers it sees (its enable_events option).
        worker_send_task_events=False,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_routes={f"vtrr_queue.reclaim.{kind}": {"queue": RECLAIM_QUEUE} for kind in KINDS},
        # Each worker also consumes a queue of its own (Celery's "<name>.dq2", bound to the
        # direct exchange C.dq2): the lease of a job of several cards that a worker's slot is
        # to lead is sent there, to be run by that worker's main thread (app/worker/gangs.py).
        worker_direct=True,
    )
    if settings.amqp_broker:
        app.conf.update(
            # A job runs in the worker's main thread (the solo pool), which then sends no AMQP
            # heartbeats: with them on, RabbitMQ would close the connection of every worker
            # whose job runs past two heartbeats, and hand its trigger to another. Off; TCP
            # keepalive still finds a dead peer.
            broker_heartbeat=0,
            # A message RabbitMQ has taken is on disk: a broker restart loses no trigger.
            broker_transport_options={"confirm_publish": True},
        )
    return app


def worker_argv(queues: list[str], hostname: str) -> list[str]:
    """The command line of one fairgpu worker: one job at a time in the worker's own process
    (the solo pool: CUDA does not survive a fork, and a SIGKILL then stops the job too)."""
    return [
        "worker",
        "--pool", "solo",
        "--concurrency", "1",
        "--prefetch-multiplier", "1",
        "--queues", ",".join(queues),
        "--hostname", hostname,
        "--without-gossip",
        "--without-mingle",
        "--loglevel", "INFO",
    ]  # fmt: skip
