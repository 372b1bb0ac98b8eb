"""A job's submit in the one call that queues it: what the job store's hooks on the fair queue's
enqueue are given (lua/submit.lua, through lua/hooks.lua), and what their reply means. The API
makes the call (AsyncFairQueue.admit_and_enqueue, with the job's item and hook_args)."""

from __future__ import annotations

from dataclasses import dataclass

from app.errors import FairGPUError
from app.models import Kind
from app.settings import Settings
from app.store.keys import CHANNEL, RATE_TTL_S, idempotency_key
from app.vtrr.wire import Admitted, as_text

#: The most jobs an account's index keeps for GET /tasks (the newest).
LISTED_PER_ACCOUNT = 10_000


class RateLimitedError(FairGPUError):
    """The submit was counted against its key's rate and is over it: nothing but the counter
    was written."""


class OverBudgetError(FairGPUError):
    """The account's monthly budget cannot cover what the job may cost: nothing but the rate
    counter was written. `budget` is 'gpu_seconds' or 'cost'; `left` is what remains of it
    (ms or micro-units), of which `held` is held by the account's unended jobs."""

    def __init__(self, budget: str, left: int, held: int) -> None:
        super().__init__(f"over the {budget} budget")
        self.budget, self.left, self.held = budget, left, held


@dataclass(frozen=True)
class Budget:
    """A budgeted account's submit: its monthly budgets (None: none of that kind; GPU-time in
    ms billed, cost in micro-units), and the most the job may be billed (ms) and cost."""

    billed_ms: int | None
    cost_micros: int | None
    most_ms: int
    most_micros: int


@dataclass(frozen=True)
class NewJob:
    """A job the API accepted, to be written and queued: of job_type with its input (JSON text),
    and the URL its final status is sent to (webhook, checked already). With rate = (the API
    key's counter for this second, requests allowed), the request is counted first; with once =
    (Idempotency-Key, request fingerprint), a key already used gets its first job."""

    job_id: str
    kind: Kind
    duration_s: float
    job_type: str = "burn"
    input_json: str = "{}"
    webhook: str | None = None
    rate: tuple[str, int] | None = None
    once: tuple[str, str] | None = None
    budget: Budget | None = None
    preemptible: bool = False
    #: The GPU classes it may run on, in order of preference (app/fleet/needs.py); () any card.
    gpu_classes: tuple[str, ...] = ()
    #: The cards it takes, all of one class on one host (issue 42).
    gpus: int = 1


def hook_args(owner: str, job: NewJob, settings: Settings) -> list[str | int]:
    """The hooks' arguments, in the order of submit.lua's header (the owner is the partition)."""
    counter, allowed = job.rate if job.rate is not None else ("", 0)
    record, fingerprint = "", ""
    if job.once is not None:
        record, fingerprint = idempotency_key(owner, job.once[0]), job.once[1]
    return [
        job.job_id,
        job.kind,
        repr(job.duration_s),
        job.job_type,
        job.input_json,
        job.webhook or "",
        allowed,
        RATE_TTL_S,
        counter,
        record,
        fingerprint,
        settings.idempotency_ttl_s,
        settings.job_ttl_s,
        LISTED_PER_ACCOUNT,
        CHANNEL,
        *_budget_args(job.budget),
        "1" if job.preemptible else "",
        ",".join(job.gpu_classes),  # a class's name holds no comma (app/fleet/catalog.py NAME)
        job.gpus,
    ]


def _budget_args(budget: Budget | None) -> list[str | int]:
    if budget is None:
        return ["", "", 0, 0]
    limits = ["" if x is None else x for x in (budget.billed_ms, budget.cost_micros)]
    return [*limits, budget.most_ms, budget.most_micros]


def submitted(job: NewJob, admitted: Admitted) -> tuple[str, bool]:
    """The job's id and whether this call created it: (job.job_id, True) once written and
    queued, (the first request's job id, False) for a replayed Idempotency-Key; over the key's
    rate, RateLimitedError."""
    if admitted.queued:
        return job.job_id, True
    outcome = [as_text(x) if isinstance(x, bytes | str) else str(x) for x in admitted.reply]
    if outcome[0] == "limited":
        allowed = job.rate[1] if job.rate is not None else 0
        raise RateLimitedError(f"over {allowed} requests a second")
    if outcome[0] == "over_budget":
        raise OverBudgetError(outcome[1], int(outcome[2]), int(outcome[3]))
    return outcome[1], False
