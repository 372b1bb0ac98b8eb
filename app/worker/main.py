"""One fairgpu worker, pinned to one GPU (or the CPU): `uv run worker.py` or `python -m app.worker`.

CUDA_VISIBLE_DEVICES names the worker's one device (none, or "-1", for a CPU worker); naming more
than one is refused. WORKER_QUEUES picks `short`, `long` or both (the default). The worker takes one
job at a time (Celery's solo pool) and runs it in its warm child process (app/worker/child.py),
started with `spawn` since CUDA does not survive a fork; a SIGKILL of the worker takes its child
down too, and the fair queue reclaims the lease. A worker whose device breaks for good (a fresh
child's device probe fails: app/worker/hygiene.py) hands back the job it holds, marks itself
broken in its heartbeat and exits with code 1 and one line that says why.

At start the worker finds its place in the fleet (app/fleet/place.py: its host, and its class
from WORKER_GPU_CLASS or its card's name and memory through GPU_CLASSES); a card that no class
fits stops it there, with exit code 1 and one line. The place goes into every heartbeat and
every run's end (its result's host and class, the class's price in the bill).

The module also exposes the Celery app as `app` for `celery -A worker beat` and Flower.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from functools import cache

from celery import Celery, signals
from celery.platforms import EX_FAILURE
from celery.worker import state as worker_state
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from app import logs
from app.auth import Accounts
from app.fleet.catalog import Catalog, CatalogError
from app.fleet.place import FleetError, WorkerPlace, place_of
from app.fleet.routing import celery_queues, queue_kind
from app.ledger.outbox import LedgerWriter
from app.ledger.stores import Ledger, open_ledger
from app.models import KINDS
from app.settings import Settings, get_settings
from app.store.workers import ALIVE_BEATS
from app.wiring.celery_app import worker_argv
from app.wiring.limits import Waker
from app.wiring.service import Service
from app.worker import gpu
from app.worker.broker_check import consumer_timeout_problem
from app.worker.calls import ChildStartError
from app.worker.gangs import Lends
from app.worker.preemption import Preemptor, Shares
from app.worker.presence import Presence
from app.worker.runner import JobRunner, build_worker, worker_name

log = logging.getLogger(__name__)


def _settings() -> Settings:
    try:
        return get_settings()
    except ValidationError as exc:  # a bad WORKER_QUEUES, say: one line, not a traceback
        sys.exit(f"fairgpu worker refuses to start: {exc}")


def _device(settings: Settings) -> gpu.Device:
    try:
        device = gpu.choose_device(os.environ, gpu.torch_cuda_count)
    except gpu.DeviceError as exc:
        sys.exit(f"fairgpu worker refuses to start: {exc}")
    if device.gpu_id is not None and settings.host_gpu_id is not None:
        return gpu.Device(gpu_id=settings.host_gpu_id)  # a container numbers its one card 0
    return device


def card(device: gpu.Device) -> tuple[str | None, int | None]:
    """The name and memory (bytes) of the worker's card; none for a CPU worker. Read through
    torch's device properties, in this process once: the job child is spawned, so nothing of
    CUDA's state here reaches it."""
    if device.gpu_id is None:
        return None, None
    import torch  # a GPU worker has it: choose_device counted the card through it

    found = torch.cuda.get_device_properties(0)  # CUDA_VISIBLE_DEVICES leaves it index 0
    return str(found.name), int(found.total_memory)


def find_place(
    settings: Settings,
    device: gpu.Device,
    read_card: Callable[[gpu.Device], tuple[str | None, int | None]] = card,
) -> WorkerPlace:
    """This worker's place in the fleet, or an exit with one line where its card fits no
    class. The card is read only where the catalog is what names the class."""
    name, memory = None, None
    if settings.gpu_classes and not settings.worker_gpu_class:
        try:
            name, memory = read_card(device)
        except Exception as exc:  # torch's errors have no common type: any is the same stop
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            sys.exit(f"fairgpu worker refuses to start: its GPU cannot be read: {first}")
    try:
        return place_of(settings, name, memory)
    except (FleetError, CatalogError) as exc:
        sys.exit(f"fairgpu worker refuses to start: {exc}")


@cache
def _worker(
    gpu_kind: str | None = None, place: WorkerPlace | None = None
) -> tuple[Settings, gpu.Device, Service, JobRunner]:
    """The worker, built once, on first use. Not at import: the job child is started with
    `spawn`, which imports this module again in the child, where nothing of it is wanted.
    Workers never queue a job, so the accounts' shares are not theirs to know (no accounts);
    Beat and Flower, which only want the Celery app, need no database either. In a mixed fleet
    a worker's queues take what its class may run (gpu_kind: app/fleet/routing.py); its runs
    are priced by its place's class."""
    settings = _settings()
    device = _device(settings)
    service, runner = build_worker(settings, Accounts([]), device, gpu_kind=gpu_kind, place=place)
    return settings, device, service, runner


def _ledger(settings: Settings) -> Ledger:
    try:
        return open_ledger(settings)
    except (ValueError, SQLAlchemyError) as exc:
        sys.exit(f"fairgpu worker refuses to start: the database: {exc}")


def __getattr__(name: str) -> Celery:
    """`app`, the Celery app, for `celery -A worker beat` and Flower (built on first use)."""
    if name == "app":
        return _worker()[2].celery
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Run the worker until it is stopped."""
    settings = _settings()
    place = find_place(settings, _device(settings))
    catalog = Catalog.from_setting(settings.gpu_classes)
    gpu_kind = queue_kind(catalog, place.gpu_class)
    settings, device, service, runner = _worker(gpu_kind, place)
    ledger = _ledger(settings)
    logs.configure(settings.log_format, settings.log_level)
    log.info("the worker's place in the fleet: %s", place.describe())
    if problem := consumer_timeout_problem(settings):
        log.error(problem)
    queues = settings.worker_queues
    name = worker_name(settings, device)
    beats = Presence(service.recorder.redis, name, queues, settings.heartbeat_seconds, place)
    # Every worker also moves bills from Redis to the SQL ledger (app/ledger/outbox.py).
    claim_ms = round(settings.ledger_claim_s * 1000)
    writer = LedgerWriter(service.recorder.redis, ledger.db, name, idle_ms=claim_ms)
    runner.on_busy = beats.busy
    broken: list[str] = []

    def stop_broken(why: str) -> None:
        """Take no more jobs and exit non-zero once the trigger in hand is done (Celery's own
        warm stop, with a failure's exit code; the drain leases nothing more). `why` says it
        as the last line does: "its device is unusable: ..."."""
        broken.append(why)
        beats.broken(why)
        worker_state.should_stop = EX_FAILURE  # type: ignore[assignment]  # stubs say None

    runner.on_broken = stop_broken
    try:
        runner.start()  # the warm child loads the job types now, not at the first job
    except ChildStartError as exc:
        sys.exit(f"fairgpu worker refuses to start: {exc}")

    # Accounts' limits: lets an account start its next job as soon as it has room (limits.py).
    waker = Waker(list(service.queues.values()))
    # Preemption: asks a run to yield its GPU to a job owed one (preemption.py).
    shares = Shares(ledger.accounts.snapshot)
    classes = [c.name for c in catalog.classes if c.name is not None] if gpu_kind else []
    preemptor = Preemptor(service.recorder.redis, name, service.queues, shares, settings, classes)
    # Jobs of several cards: this worker's card leads or is lent (gangs.py); its slot is live
    # while it ticks, as long as a worker is counted alive after its last heartbeat.
    served = [service.queues[kind] for kind in KINDS if kind in queues]
    seen_ttl_s = ALIVE_BEATS * settings.heartbeat_seconds
    lends = Lends(served, runner.executor, name, seen_ttl_s, lent=beats.lent)

    def ready(**_: object) -> None:
        beats.start()
        writer.start()
        waker.start()
        preemptor.start()
        lends.start()

    signals.worker_ready.connect(ready, weak=False)

    def shut_down(**_: object) -> None:
        lends.stop()  # its slot left: no job of several cards is placed on its card again
        preemptor.stop()
        waker.stop()
        beats.stop()
        writer.close()
        runner.close()
        ledger.close()

    signals.worker_shutdown.connect(shut_down, weak=False)
    # SIGTERM (a warm shutdown): Celery takes no new job and waits for the current one; past
    # SHUTDOWN_GRACE_S the runner stops it and hands it back to the queue.
    signals.worker_shutting_down.connect(
        lambda **_: runner.hand_back_after(settings.shutdown_grace_s), weak=False
    )
    try:
        service.celery.worker_main(worker_argv(celery_queues(queues, gpu_kind), name))
    finally:
        if broken:
            # fd 2 itself: Celery has put its logger in place of sys.stderr
            os.write(2, f"fairgpu worker stopped: {broken[0]}\n".encode())
            sys.exit(EX_FAILURE)


if __name__ == "__main__":
    main()
