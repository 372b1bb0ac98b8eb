"""Devices: the cards a run takes, and the process it runs in (the runner's executor).

A job of one card runs on the worker's own card, in its warm child. A job of several runs on the
cards its placement names (FairQueue.placement: the leader's first), in one child process of its
own whose CUDA_VISIBLE_DEVICES names exactly them, in order (job_process.py): the warm child was
spawned seeing the worker's one card and cannot be reused. Before such a run the leader retires
its warm child (its card's memory must be free) and waits, a bounded while, until every worker
lending a card says its card is clean (FairQueue.lenders_ready); its next job of one card starts
a warm child again. The run's child is closed when the job ends, before its end is recorded and
its lease acked, which frees the cards: no card is in two jobs' runs at once.

A lending worker's warm child is retired by the watcher's thread (app/worker/gangs.py) while the
worker's main thread may be starting a job: every run holds `lock`, and a retire takes it only
when it is free (the next tick tries again otherwise).
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.fleet.place import WorkerPlace
from app.jobs.context import Device
from app.models import ChildReplacement
from app.settings import Settings
from app.store import RunEnd
from app.vtrr import FairQueue, Slot
from app.worker.calls import Call, Ended, never
from app.worker.child import JobChild
from app.worker.gpu import Device as WorkerDevice
from app.worker.hygiene import ChildLimits
from app.worker.live import NO_EVENTS, JobEvents
from app.worker.probe import probe_for

if TYPE_CHECKING:
    from app.worker.runner import Executor

log = logging.getLogger(__name__)

LENDERS_POLL_S = 0.1  # how often a leader looks whether its lenders' cards are clean
#: How long a leader waits for them before it runs all the same (and logs it): a lender retires
#: its child within a tick or two, unless it is gone, when the job's reclaim will follow.
LENDERS_WAIT_S = 10.0


def job_child(
    settings: Settings, gpu_id: int | None, gpu_ids: tuple[int, ...] | None = None
) -> JobChild:
    """A job child as the settings make it: the worker's warm one (gpu_ids None: it sees the
    worker's own card), or a job's of several cards, which sees exactly gpu_ids."""
    return JobChild(
        settings.job_modules,
        gpu_id,
        timeout_grace_s=settings.timeout_grace_s,
        cancel_grace_s=settings.cancel_grace_s,
        preempt_grace_s=settings.preempt_grace_s,
        setup_timeout_s=settings.setup_timeout_s,
        limits=ChildLimits.of(settings),
        probe=probe_for(gpu_id, settings.device_probe),
        gpu_ids=gpu_ids,
    )


def apart(
    settings: Settings, gpu_id: int | None, on_replace: Callable[[ChildReplacement], None]
) -> Callable[[tuple[int, ...] | None], JobChild]:
    """What makes the child of a run of several cards (Devices.one_off): it sees exactly their
    gpu ids, and its replacements are counted as the warm child's are."""

    def one_off(gpu_ids: tuple[int, ...] | None) -> JobChild:
        child = job_child(settings, gpu_id, gpu_ids)
        child.on_replace = on_replace
        return child

    return one_off


def slot_of(place: WorkerPlace | None, device: WorkerDevice, name: str) -> Slot | None:
    """The worker's card in its fleet (None: a worker told no place, as tests build them): its
    host, the card (its gpu id; a CPU worker's simulated card is named after the worker)."""
    if place is None:
        return None
    return Slot(place.host, name if device.gpu_id is None else str(device.gpu_id), name)


def devices_json(devices: tuple[Device, ...]) -> str:
    """A run's devices as its job's record keeps them: [{"worker", "gpu_id"}], in order."""
    return json.dumps([{"worker": d.worker, "gpu_id": d.gpu_id} for d in devices])


def recorded_on(end: RunEnd | None, devices: tuple[Device, ...]) -> RunEnd | None:
    """The end to record, naming the run's devices where it had several (a run of one card
    has its worker's, which its record names already)."""
    if end is None or len(devices) <= 1:
        return end
    return replace(end, devices=devices_json(devices))


class Devices:
    """The runner's executor: the warm one for a job of one card, a child of its own for a job
    of several (one_off; None, as in tests that run jobs inline: the warm executor runs it too,
    with the job's devices in its context)."""

    def __init__(self, warm: Executor, worker: str, gpu_id: int | None) -> None:
        self.warm, self.worker, self.gpu_id = warm, worker, gpu_id
        #: The devices of a run of one card: this worker's own.
        self.own = (Device(worker, gpu_id),)
        #: Makes the child of a run of several cards: their gpu ids (None on a CPU worker).
        self.one_off: Callable[[tuple[int, ...] | None], Executor] | None = None
        #: Held by every run: the watcher retires the warm child only while no run holds it.
        self.lock = threading.Lock()
        #: The jobs this worker's slot leads, as the watcher last heard (gangs.py): their runs
        #: ask for their placement; a run of one card asks nothing (the fast path).
        self.led: frozenset[str] = frozenset()
        self._running: Executor = warm
        self._stop_by = math.inf

    def placed(self, queue: FairQueue, job_id: str, ask: bool = False) -> tuple[Device, ...]:
        """The devices of the job's run: its placement's cards where this worker leads it (or
        `ask`: a run that came without the fast path's lease, as a held lease's does), else,
        and for a placement of one card, this worker's own."""
        if not ask and job_id not in self.led:
            return self.own
        placement = queue.placement(job_id)
        if placement is None or len(placement.cards) <= 1:
            return self.own
        cards = zip(placement.workers, placement.cards, strict=True)
        return tuple(Device(worker, self._gpu_id(card)) for worker, card in cards)

    def _gpu_id(self, card: str) -> int | None:
        """A card's gpu id: its slot's name on a GPU worker, none on a CPU worker's simulated
        card (named after its worker)."""
        return int(card) if self.gpu_id is not None and card.isdigit() else None

    def gather(self, queue: FairQueue, job_id: str, devices: tuple[Device, ...]) -> None:
        """Before a run of several cards: the warm child retired (its card's memory freed),
        and the lenders' cards said clean, or LENDERS_WAIT_S passed (logged: the run goes on,
        and a card still held shows as the job's own failure to get its memory)."""
        if len(devices) <= 1:
            return
        with self.lock:
            self.warm.close()
        deadline = time.monotonic() + LENDERS_WAIT_S
        while not queue.lenders_ready(job_id):
            if time.monotonic() >= deadline:
                log.warning(
                    "the lenders' cards were not said clean in time: running all the same",
                    extra={"task_id": job_id, "devices": devices_json(devices)},
                )
                return
            time.sleep(LENDERS_POLL_S)

    def retire(self) -> bool:
        """Close the warm child, so that the card's memory is free (a lend's first step; the
        next run of one card starts it again), unless a run holds the lock: whether it did.
        JobChild.close() returns once the child and every process below it have exited, and
        a process's memory on its card is freed when it exits."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self.warm.close()
            return True
        finally:
            self.lock.release()

    # -- the Executor --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the warm child."""
        self.warm.start()

    def run(
        self,
        call: Call,
        should_stop: Callable[[], bool],
        events: JobEvents = NO_EVENTS,
        should_yield: Callable[[], bool] = never,
    ) -> Ended:
        """Run the call on its devices (Executor.run), holding the lock."""
        with self.lock:
            if len(call.devices) <= 1 or self.one_off is None:
                return self.warm.run(call, should_stop, events, should_yield)
            return self._run_apart(call, should_stop, events, should_yield)

    def _run_apart(
        self,
        call: Call,
        should_stop: Callable[[], bool],
        events: JobEvents,
        should_yield: Callable[[], bool],
    ) -> Ended:
        """A run of several cards, in a child of its own, closed when it ends."""
        assert self.one_off is not None
        ids = tuple(d.gpu_id for d in call.devices)
        gpu_ids = tuple(i for i in ids if i is not None) if self.gpu_id is not None else None
        child = self.one_off(gpu_ids)
        child.must_stop_by(self._stop_by)
        self._running = child
        try:
            return _kept(child.run(call, should_stop, events, should_yield))
        finally:
            self._running = self.warm
            child.close()

    def must_stop_by(self, at: float) -> None:
        """The run's lease's deadline, to the child that runs it (Watched)."""
        self._stop_by = at
        self._running.must_stop_by(at)

    def broken(self) -> str | None:
        """Why the worker's own card is unusable, or None."""
        return self.warm.broken()

    def close(self) -> None:
        """Close the warm child."""
        self.warm.close()


def _kept(ended: Ended) -> Ended:
    """The end with its output folder moved out of the child's own, which closing deletes: the
    runner stores its files as the job's artifacts, then deletes it."""
    if ended.output_dir is None:
        return ended
    folder = Path(tempfile.mkdtemp(prefix="fairgpu-output-"))
    for entry in ended.output_dir.iterdir():
        shutil.move(entry, folder / entry.name)
    shutil.rmtree(ended.output_dir, ignore_errors=True)
    return replace(ended, output_dir=folder)
