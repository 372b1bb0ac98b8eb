"""RunEnds: how a run's end, as the executor reports it (calls.Ended), becomes the end the job
store records and its bill. Who pays (the owner's cancel is billed, an operator's stop and a
failed setup() are not, a run that lost its lease leaves it to the next: the end's reason,
end_reason.Why, says which stop it was, as the run's stop check heard it), how much (the seconds
it ran, never more than its budget, at least MIN_BILLED_S), and what the status says; where
working that out fails, a bug of ours and not the job's, the run ends `internal` all the same.

Where the run was (the worker's place: app/fleet/place.py) goes with each end: its host and class
are written on the job for its result, and the class's price weights the bill's cost and the
fair-share charge (used_weight); without a catalog the price is 1.0 and nothing changes.

A job of several cards (gpus N, issue 42) is billed and charged for every card: its bill's
seconds and cost are N times a card's (pricing.price), and so is its used weight, as its item's
weight is N times its duration's. The callers pass the job's gpus; 1 where they do not.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import replace
from decimal import Decimal

from app import pricing
from app.bill import Charge, check_gpus
from app.fleet.place import WorkerPlace
from app.fleet.worker_class import worker_host
from app.models import Kind, Status
from app.settings import Settings
from app.store import RunEnd, Started
from app.store.recorder import INTERNAL_ERROR, internal_end
from app.vtrr.celery_queue import UNREACHABLE  # Redis not reached: not the job's failure
from app.wiring.service import job_weight
from app.worker.calls import Ended
from app.worker.end_reason import Why

log = logging.getLogger(__name__)


def unplaced(settings: Settings) -> WorkerPlace:
    """The place of a worker told none: this host, no class, price 1.0 (a fleet without
    GPU_CLASSES)."""
    return WorkerPlace(host=worker_host(settings), gpu_class=None, memory_gb=None, price=1.0)


class RunEnds:
    """The end to record of each run, for one worker, at its place (unplaced() where None)."""

    def __init__(self, settings: Settings, place: WorkerPlace | None = None) -> None:
        self._settings = settings
        #: Where this worker's runs are: their host, class and the class's price.
        self.place = place or unplaced(settings)

    def used_weight(self, seconds: float, gpus: int = 1) -> int:
        """The fair-share charge of a run's seconds (its earlier runs' too) on gpus cards: the
        fair queue's weight of those seconds (job_weight: milliseconds, at least 1 s worth)
        times the cards, as the item's weight is, times the class's price, rounded up; exactly
        job_weight at one card and price 1.0."""
        plain = job_weight(seconds) * check_gpus(gpus)
        if self.place.price == 1.0:
            return plain
        return math.ceil(plain * Decimal(repr(self.place.price)))

    def of(
        self, kind: Kind, job_id: str, started: Started, ended: Ended, gpus: int = 1
    ) -> tuple[str, RunEnd | None]:
        """What happened and the end to record (_end_of); where working it out fails (a bug of
        ours, not the job's), the run ended `internal`, billed as it ran: the job ends either
        way. Redis away is not such a failure: the end is then not recorded, the lease not
        acked, and the job runs again."""
        try:
            return self._end_of(kind, job_id, started, ended, gpus)
        except UNREACHABLE:
            raise
        except Exception as exc:
            ended = internal(job_id, ended, exc)
        try:
            charge: Charge | None = self.price(kind, started, ended, gpus)
        except Exception:
            charge = None  # the price itself failed: nothing it could bill
        end = RunEnd(
            job_id=job_id,
            owner=started.owner,
            status=Status.FAILURE,
            charge=charge,
            seconds=ended.seconds,
            facts=ended.facts,
            host=self.place.host,
            gpu_class=self.place.gpu_class,
        )
        return "failed: internal", internal_end(end)

    def price(self, kind: Kind, started: Started, ended: Ended, gpus: int | None = None) -> Charge:
        """What the job costs once this run has ended: the seconds of all its runs (a job
        preempted before has earlier ones), at most its declared duration, at least
        MIN_BILLED_S, on each of its gpus cards (by default the run's: started.gpus)."""
        gpus = started.gpus if gpus is None else gpus
        end = None if ended.end in ("success", "preempted") else ended.end
        charge = pricing.price(
            self._settings,
            kind,
            started.ran_s + ended.seconds,
            job_type=started.type,
            end=end,
            budget_s=started.duration_s,
            gpu_class=self.place.gpu_class,
            class_price=self.place.price,
            gpus=gpus,
        )
        # its earlier runs, preempted or lost after a checkpoint (ran_runs counts both; the
        # store reads a job preempted before the field existed as its preemptions)
        runs = started.ran_runs + 1
        if runs == 1:
            return charge
        return replace(charge, description=f"{charge.description}, over {runs} runs")

    def _end_of(
        self, kind: Kind, job_id: str, started: Started, ended: Ended, gpus: int
    ) -> tuple[str, RunEnd | None]:
        """What happened, and the end to record. Every run that held the GPU is billed for the
        seconds it ran (at least MIN_BILLED_S), whatever its end, except a run stopped by an
        operator, one that lost its lease (its next run is billed instead) and one whose type's
        setup() failed (the job never began: the operator's type is at fault, not its owner)."""
        if ended.end == "cancelled":
            why = ended.why or Why.LEASE_LOST
            return self._stopped(kind, job_id, started, ended, why, gpus)
        charge: Charge | None = None  # a setup() that failed: the job never began
        if ended.end != "setup":
            charge = self.price(kind, started, ended, gpus)
        status = Status.SUCCESS if ended.end == "success" else Status.FAILURE
        if ended.end == "preempted":  # the runner puts a preempted run back in line
            raise ValueError("a preempted run has no end to record")
        end = RunEnd(
            job_id=job_id, owner=started.owner, status=status, charge=charge,
            seconds=ended.seconds, error=ended.error or "",
            error_kind=None if ended.end == "success" else ended.end,
            output=ended.output, tflops=_tflops(started.type, ended.output),
            peak_gpu_memory_bytes=ended.peak_gpu_memory_bytes,
            peak_rss_bytes=ended.peak_rss_bytes, artifacts=ended.artifacts, facts=ended.facts,
            host=self.place.host, gpu_class=self.place.gpu_class,
        )  # fmt: skip
        return ("done" if status is Status.SUCCESS else f"failed: {ended.end}"), end

    def _stopped(
        self, kind: Kind, job_id: str, started: Started, ended: Ended, why: Why, gpus: int
    ) -> tuple[str, RunEnd | None]:
        """The end of a run that was asked to stop, by whom its stop check heard. Who pays: the
        owner's cancel is billed for the time it ran; an operator's stop (a dropped queue) is
        not, and revoke.lua has ended the job already; a lost lease (an admin's release, a
        reclaim) leaves the job to its next run, which alone is billed. Every end is fenced by
        the token. A hand-back records no end: handback.py gives the job back."""
        if why is Why.LEASE_LOST:
            return "lease lost", None  # another run owns the job now; leave its end to that run
        if why not in (Why.CANCEL, Why.OPERATOR):  # (the runner hands a hand-back's job back)
            raise ValueError(f"a run stopped for {why.value} has no end to record")
        charge = self.price(kind, started, ended, gpus)
        end = RunEnd(
            job_id=job_id, owner=started.owner, status=Status.REVOKED,
            charge=charge if why.billed else None, seconds=ended.seconds,
            error_kind="cancelled", peak_gpu_memory_bytes=ended.peak_gpu_memory_bytes,
            peak_rss_bytes=ended.peak_rss_bytes, facts=ended.facts,
            host=self.place.host, gpu_class=self.place.gpu_class,
        )  # fmt: skip
        return ("cancelled" if why is Why.CANCEL else "stopped by an operator"), end


def internal(job_id: str, ended: Ended, exc: Exception) -> Ended:
    """The run ended `internal`: the worker failed around it. Its details go to the worker's
    log; its owner reads INTERNAL_ERROR."""
    log.error("the worker failed around the job's run", exc_info=exc, extra={"task_id": job_id})
    return replace(
        ended, end="internal", output=None, error=INTERNAL_ERROR, artifacts=None, why=None
    )


def _tflops(job_type: str, output: str | None) -> float | None:
    """The TFLOP/s a burn job reached (kept in the result as before job types existed)."""
    if job_type != "burn" or output is None:
        return None
    value = json.loads(output).get("tflops")
    return float(value) if isinstance(value, int | float) else None
