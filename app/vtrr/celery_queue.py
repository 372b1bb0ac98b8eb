"""VTRRQueue: the fair queue driving a Celery task through payload-less triggers.

`task.queue()` writes items to Redis and publishes at most `max_concurrency` triggers: Celery
messages with no arguments that only wake a worker. The worker's task leases the fairest item,
runs the decorated function on it and acks the lease when the task ends (success or failure).
A retry keeps the lease; process death leaves it to expire and be reclaimed.

When the broker is the queue's own Redis, the scripts push the triggers themselves, in the same
call that made them due (see `_trigger_keys`): a trigger then costs no Kombu publish and no
round trip of its own.

Queues that one worker serves together may share their triggers (`serve_together`, together.py): a
trigger of any of them then runs the item that a policy of the application picks among them.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, overload

from celery import Celery, Task
from celery import states as celery_states
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.vtrr.aio import AsyncFairQueue
from app.vtrr.celery_task import TASK_OPTIONS, VTRRTask, kind_celery_queue
from app.vtrr.delivery import Delivery, delivery_of
from app.vtrr.drain import DRAIN_MAX_S, run_trigger
from app.vtrr.fleet_cards import RESERVATION_GRACE_S
from app.vtrr.group import QueueGroup
from app.vtrr.held import LEASE_KWARG, held_lease
from app.vtrr.hooks import Hooks, NoHooks
from app.vtrr.item import Shares
from app.vtrr.layout import FAIR, TRIGGERS_SYNC, TRIGGERS_TOPUP, TRIGGERS_UNSEND, Placement
from app.vtrr.queue import FairQueue
from app.vtrr.scripts import Scripts, no_trigger_push
from app.vtrr.slots import Slot
from app.vtrr.trigger_push import broker_is, trigger_message
from app.vtrr.wire import as_text

log = logging.getLogger(__name__)

_FINAL_STATES = frozenset({celery_states.SUCCESS, celery_states.FAILURE})
#: A task that raised one of these could not reach Redis: it keeps its lease (see after_return).
UNREACHABLE = (RedisConnectionError, RedisTimeoutError)
#: A process's stored trigger message expires unless it publishes again: messages of processes
#: long gone do not pile up, and a live one stores its message again at the next top-up.
TRIGGER_MESSAGE_TTL_S = 86_400


class Policy(Protocol):
    """How a worker that serves several queues together chooses among them (serve_together)."""

    def order(self, trigger: VTRRQueue) -> Sequence[VTRRQueue]:
        """The queues to lease from for a run of a trigger of `trigger`, preferred first: the
        fairest item of the first one with any queued runs."""
        ...

    def took(self, queue: VTRRQueue | None, queued: Mapping[str, int]) -> None:
        """Told after each lease where it came from (None: every queue was empty) and how many
        items each queue (by name) still has queued."""
        ...


class VTRRQueue(FairQueue):
    """A fair queue whose items are run by one Celery task, woken by payload-less triggers."""

    def __init__(
        self,
        redis_client: Redis,
        celery_app: Celery,
        name: str,
        celery_queue: str = "vtrr_queue",
        max_concurrency: int = 4,
        lease_seconds: float = 3900,
        reclaim_interval: float | None = None,
        reclaim_queue: str | None = None,
        *,
        shares: Shares | None = None,
        push_triggers: bool | None = None,
        drain_max_s: float = DRAIN_MAX_S,
        hooks: Hooks | None = None,
        replicas: int = 0,
        limits_group: str | None = None,
        usage_half_life_s: float | None = None,
        reclaim_to: Placement = FAIR,
        kind: str | None = None,
        slot: Slot | None = None,
        reservation_grace_s: float = RESERVATION_GRACE_S,
        reserves: bool = True,
    ) -> None:
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
            raise TypeError(f"max_concurrency must be an int, got {max_concurrency!r}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        super().__init__(
            redis_client,
            name,
            lease_seconds=lease_seconds,
            shares=shares,
            replicas=replicas,
            limits_group=limits_group,
            usage_half_life_s=usage_half_life_s,
            reclaim_to=reclaim_to,
            kind=kind,
            slot=slot,
            reservation_grace_s=reservation_grace_s,
            reserves=reserves,
        )
        self.celery_app = celery_app
        #: The Celery queue of the triggers of items that any consumer may take; a consumer of a
        #: kind takes its own kind's triggers from kind_celery_queue(...) as well.
        self.base_celery_queue = celery_queue
        self.celery_queue = celery_queue if kind is None else kind_celery_queue(celery_queue, kind)
        self._views: dict[str, VTRRQueue] = {}
        self.max_concurrency = max_concurrency
        self.trigger_cap = max_concurrency
        self.reclaim_interval = reclaim_interval
        self.reclaim_queue = reclaim_queue
        self.reclaim_task_name = f"vtrr_queue.reclaim.{name}"
        self._task: VTRRTask | None = None
        self._function: Callable[..., Any] | None = None
        #: The queues a trigger's run serves with this one: itself alone, or those that
        #: serve_together joined, with their policy (group.py).
        self.group: QueueGroup[VTRRQueue] = QueueGroup([self])
        self._push_option = push_triggers
        self.drain_max_s = drain_max_s  # 0: one item per trigger (see drain.py)
        self._trigger_route: tuple[str, str] | None = None
        self._trigger_message: str | None = None
        self.hooks: Hooks = hooks or NoHooks()
        self.scripts = Scripts(redis_client, self.keys, self._trigger_keys, self.hooks.lua)
        if reclaim_interval is not None:
            self._register_reclaim()

    # -- the decorator ----------------------------------------------------------------------------
    @overload
    def task(self, fun: Callable[..., Any]) -> VTRRTask: ...

    @overload
    def task(
        self, fun: None = None, **options: Any
    ) -> Callable[[Callable[..., Any]], VTRRTask]: ...

    def task(
        self, fun: Callable[..., Any] | None = None, **options: Any
    ) -> VTRRTask | Callable[[Callable[..., Any]], VTRRTask]:
        """Decorate the one function this queue runs; usable bare or with Celery options."""
        unknown = set(options) - TASK_OPTIONS - {"bind"}
        if unknown:
            raise TypeError(f"@vtrr.task got unsupported options {sorted(unknown)}")
        options.pop("bind", None)

        def decorate(f: Callable[..., Any]) -> VTRRTask:
            if self._task is not None:
                raise ValueError(
                    f"queue {self.name!r} already runs {self._task.name}; "
                    "use one VTRRQueue per task"
                )
            self._task = VTRRTask(self, self._celery_task(f, options))
            self._function = f
            return self._task

        return decorate if fun is None else decorate(fun)

    def _celery_task(self, fun: Callable[..., Any], options: dict[str, Any]) -> Task:  # type: ignore[type-arg]
        vtrr = self
        base: type[Task] = options.pop("base", None) or self.celery_app.Task  # type: ignore[type-arg]

        def run(task: Task, *_: Any, **kwargs: Any) -> Any:  # type: ignore[type-arg]
            return run_trigger(vtrr, task, kwargs.get(LEASE_KWARG))

        def after_return(task: Task, status: str, retval: Any, *rest: Any) -> None:  # type: ignore[type-arg]
            # Called for SUCCESS and FAILURE only; a retry keeps its lease, and a process that
            # dies (SystemExit from a hard time limit included) never gets here. A task that
            # failed because Redis was unreachable keeps its lease too: its work may not have
            # been recorded, so the item runs again once the lease expires.
            held = held_lease(task)
            unreachable = status == celery_states.FAILURE and isinstance(retval, UNREACHABLE)
            if status in _FINAL_STATES and held is not None and not unreachable:
                source = vtrr.group.get(vars(task.request).get("vtrr_queue", vtrr.name)) or vtrr
                source.ack(held.task_id, held.token)
            base.after_return(task, status, retval, *rest)

        run.__name__, run.__qualname__, run.__module__ = (
            fun.__name__,
            fun.__qualname__,
            fun.__module__,
        )
        run.__doc__ = fun.__doc__
        # shared=False: this task belongs to this app and this queue only, never to other apps
        # that the process finalizes later.
        decorator = self.celery_app.task(
            bind=True, base=base, after_return=after_return, shared=False, **options
        )
        celery_task: Task = decorator(run)  # type: ignore[type-arg, no-untyped-call]
        return celery_task

    # -- the low-level API ------------------------------------------------------------------------
    def _dequeue(self) -> Delivery | None:
        """Lease the fairest item as a trigger's run does: (task_name, args, kwargs, id, token,
        timeouts), or None when nothing is queued. Ack it with `ack(task_id, token)`."""
        return delivery_of(self._take(consumes_trigger=True))

    def run_item(self, task: Task, delivery: Delivery) -> Any:  # type: ignore[type-arg]
        """Run this queue's decorated function on one of its items, in a run of `task` (a
        trigger's: drain.py)."""
        if self._function is None:
            raise RuntimeError(f"queue {self.name!r} has no @vtrr.task to run its items")
        return self._function(task, *delivery.args, **delivery.kwargs)

    def aio(self, redis_client: AsyncRedis, replicas: int = 0) -> AsyncFairQueue:
        """This queue on an asyncio client (same name, shares, trigger cap and hooks), for web
        handlers; send the triggers its enqueue asks for with publish_triggers, off the event
        loop. With replicas, an enqueue returns once that many replicas have it (WAIT)."""
        return AsyncFairQueue(
            redis_client,
            self.name,
            shares=self._shares,
            trigger_cap=self.trigger_cap,
            trigger_keys=self._trigger_keys,
            hooks_lua=self.hooks.lua,
            replicas=replicas,
            limits_group=self.limits_group,
            usage_half_life_s=self.usage_half_life_s,
        )

    # -- kinds ------------------------------------------------------------------------------------
    def kind_view(self, kind: str) -> VTRRQueue:
        """This queue as the consumers of one kind see it (itself, when it is theirs): its
        triggers are their Celery queue's, and its leases take what they may take. It runs the
        same task."""
        if kind == self.kind:
            return self
        view = self._views.get(kind)
        if view is None:
            view = VTRRQueue(
                self.redis,
                self.celery_app,
                self.name,
                self.base_celery_queue,
                self.max_concurrency,
                self.lease_seconds,
                shares=self._shares,
                push_triggers=self._push_option,
                drain_max_s=self.drain_max_s,
                hooks=self.hooks,
                replicas=self.replicas,
                limits_group=self.limits_group,
                usage_half_life_s=self.usage_half_life_s,
                reclaim_to=self.reclaim_to,
                kind=kind,
            )
            view.runs(self)
            self._views[kind] = view
        return view

    def runs(self, other: VTRRQueue) -> None:
        """Run what other runs (its decorated function, through its task): a kind's view."""
        self._task, self._function = other.vtrr_task, other.function

    @property
    def vtrr_task(self) -> VTRRTask | None:
        """What @task made of this queue's function, or None before."""
        return self._task

    @property
    def function(self) -> Callable[..., Any] | None:
        """The function that runs this queue's items, or None before @task."""
        return self._function

    def trigger_kinds(self, kinds: Iterable[str]) -> None:
        """Top up the triggers of the consumers of each kind, in order, to what each may take
        (after an enqueue of items that name them: FairQueue.enqueue does it; an
        AsyncFairQueue's caller sends them off the event loop, as publish_triggers)."""
        for kind in kinds:
            view = self.kind_view(kind)
            count, _ = view.scripts.run("triggers", TRIGGERS_TOPUP, 0, view.trigger_cap)
            view.publish_triggers(int(count))

    # -- triggers ---------------------------------------------------------------------------------
    def publish_triggers(self, count: int) -> None:
        """Send count triggers (as a call of this queue, or an AsyncFairQueue's enqueue, asked);
        broker errors are logged, and any not sent are uncounted, so a later top-up sends them."""
        if count <= 0:
            return
        sent = 0
        try:
            if self._task is None:
                raise RuntimeError(f"queue {self.name!r} has no @vtrr.task to trigger")
            if self._trigger_message is not None:
                # The scripts found no message of ours (the first top-up, an expiry, a flushed
                # Redis): store it, so that they push the next triggers themselves.
                key = self._trigger_keys()[0]
                self.redis.set(key, self._trigger_message, ex=TRIGGER_MESSAGE_TTL_S)
            with self.celery_app.producer_or_acquire() as producer:
                for _ in range(count):
                    self._task.celery_task.apply_async(queue=self.celery_queue, producer=producer)
                    sent += 1
        except Exception:
            log.warning(
                "queue %s: published %d of %d triggers; reclaim_and_dispatch will send the rest",
                self.name,
                sent,
                count,
                exc_info=True,
            )
            self.scripts.run("triggers", TRIGGERS_UNSEND, count - sent, self.trigger_cap)

    def _trigger_keys(self) -> tuple[str, str]:
        """The scripts' trigger keys: (this process's stored message, the broker's list) when
        they may push triggers, else a message key that never exists. Decided at first use,
        once the task exists, as building the message goes through Celery's send path."""
        if self._trigger_route is None:
            if self._task is None:
                return no_trigger_push(self.keys)()
            pushes = self._push_option
            if pushes is None:
                pushes = broker_is(self.celery_app, self.redis)
            message = trigger_message(self._task.celery_task, self.celery_queue) if pushes else None
            if message is None:
                self._trigger_route = no_trigger_push(self.keys)()
            else:
                digest = hashlib.sha256(message.encode()).hexdigest()[:16]
                self._trigger_message = message
                self._trigger_route = (f"{self.keys.triggers}:message:{digest}", self.celery_queue)
        return self._trigger_route

    def _broker_depth(self) -> int | None:
        """Triggers waiting in the broker's queue, or None when the broker cannot say."""
        try:
            with self.celery_app.connection_for_read() as conn:
                try:
                    channel: Any = conn.default_channel
                    ok = channel.queue_declare(queue=self.celery_queue, passive=True)
                except conn.channel_errors:
                    return 0  # the broker has no such queue: nothing waits in it
                return int(ok.message_count)
        except Exception:
            log.warning("queue %s: cannot read the broker's queue depth", self.name, exc_info=True)
            return None

    def reclaim_and_dispatch(self) -> int:
        """Reclaim expired leases, then top triggers up to what is queued; returns triggers sent.

        The broker's own count of waiting triggers replaces ours, so triggers lost behind our
        back (a worker that died holding one, a purged queue) are sent again.
        """
        reclaimed, queued = self._reclaim(trigger_cap=-1)
        if reclaimed:
            log.info("queue %s: reclaimed %d expired leases", self.name, reclaimed)
        sent = 0
        for kind in sorted(as_text(k) for k in self.redis.smembers(self.keys.kinds)):
            if kind != self.kind:  # (each kind's consumers count their own triggers)
                sent += self.kind_view(kind).sync_triggers()
        return sent + (self.sync_triggers() if queued else 0)

    def sync_triggers(self) -> int:
        """Top this view's triggers up to what it may take, the broker's count of those waiting
        replacing ours; returns triggers sent."""
        depth = self._broker_depth()
        if depth is None:
            count, pushed = self.scripts.run("triggers", TRIGGERS_TOPUP, 0, self.trigger_cap)
        else:
            count, pushed = self.scripts.run("triggers", TRIGGERS_SYNC, depth, self.trigger_cap)
        self.publish_triggers(int(count))
        return int(count) + int(pushed)

    # -- periodic reclaim -------------------------------------------------------------------------
    def reclaim_beat_schedule(self) -> dict[str, dict[str, Any]]:
        """The Celery Beat entry that runs reclaim_and_dispatch every reclaim_interval seconds."""
        if self.reclaim_interval is None:
            return {}
        options = {"queue": self.reclaim_queue} if self.reclaim_queue else {}
        entry = {
            "task": self.reclaim_task_name,
            "schedule": self.reclaim_interval,
            "options": options,
        }
        return {self.reclaim_task_name: entry}

    def _register_reclaim(self) -> None:
        def reclaim_and_dispatch() -> int:
            return self.reclaim_and_dispatch()

        self.celery_app.task(name=self.reclaim_task_name, ignore_result=True, shared=False)(
            reclaim_and_dispatch
        )
        schedule = dict(self.celery_app.conf.beat_schedule or {})
        self.celery_app.conf.beat_schedule = {**schedule, **self.reclaim_beat_schedule()}
