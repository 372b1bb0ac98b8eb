"""The fair queue: virtual-time round-robin on Redis, usable by any Celery application.

    from app.vtrr import VTRRQueue
    vtrr = VTRRQueue(redis.Redis(...), celery_app, name="files", max_concurrency=8)

    @vtrr.task(soft_time_limit=3600, time_limit=3720)
    def process_file(self, key): ...

    process_file.queue(partition_key="user-1", tasks=[{"args": ["a.pdf"], "weight": 2}])

This package imports redis and celery only; nothing else of fairgpu.
"""

from app.vtrr.celery_queue import Policy, VTRRQueue
from app.vtrr.celery_task import VTRRTask
from app.vtrr.delivery import Delivery, Taken
from app.vtrr.errors import (
    DropRefusedError,
    DuplicateTaskError,
    NotReplicatedError,
    OverLimitError,
    QueueFullError,
    VTRRError,
)
from app.vtrr.fleet_cards import Tick
from app.vtrr.group import QueueGroup, wake_together
from app.vtrr.heartbeat import Heartbeat
from app.vtrr.held import HeldLease, held_lease
from app.vtrr.hooks import Hooks, end_with
from app.vtrr.item import Dropped, Item, Lease
from app.vtrr.limits import Hold, Limits, Woken
from app.vtrr.queue import FairQueue
from app.vtrr.redq import RedisQueue, Task
from app.vtrr.slots import Held, Placement, Reservation, Slot
from app.vtrr.together import serve_together
from app.vtrr.wire import Admitted

__all__ = [
    "Admitted",
    "Delivery",
    "DropRefusedError",
    "Dropped",
    "DuplicateTaskError",
    "FairQueue",
    "Heartbeat",
    "Held",
    "HeldLease",
    "Hold",
    "Hooks",
    "Item",
    "Lease",
    "Limits",
    "NotReplicatedError",
    "OverLimitError",
    "Placement",
    "Policy",
    "QueueFullError",
    "QueueGroup",
    "RedisQueue",
    "Reservation",
    "Slot",
    "Taken",
    "Task",
    "Tick",
    "VTRRError",
    "VTRRQueue",
    "VTRRTask",
    "Woken",
    "end_with",
    "held_lease",
    "serve_together",
    "wake_together",
]
