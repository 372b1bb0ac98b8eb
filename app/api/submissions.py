"""What a submitted job is: the body of POST /enqueue-task read against the registered job types
and the queues' limits, and its webhook against the deployment's rules (app/webhooks/), or a 422
that names what is wrong. Nothing here touches Redis, so a refused submit changes nothing. What
depends on the account or the fleet (a script job's run_scripts and its code, a job's count of
cards against max_running and the fleet's hosts) is checked at submit (routes/jobs.py)."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from app.fleet.needs import GpuNeed, NeedError, allowed_classes, catalog_of
from app.jobs import JobType, Registry
from app.models import EnqueueRequest, Kind, TypedEnqueueRequest
from app.settings import Settings
from app.webhooks import destination
from app.webhooks.signing import signer

#: The type of a job submitted with the original body {"kind", "duration_s"}.
BURN = "burn"
#: The built-in type that runs an account's uploaded code (docs/scripts.md): its input names the
#: code (`code`), and only it takes the body's `preemptible`.
SCRIPT = "script"
NO_INPUT = "{}"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Submission:
    """A job ready to be written: its type, its input as canonical JSON, its queue, its time
    budget, and the URL its final status goes to, if any."""

    type: str
    input_json: str
    kind: Kind
    duration_s: float
    webhook: str | None = None
    #: Whether its runs may be asked to yield: its type's, or a script job's body's.
    preemptible: bool = False
    #: The uploaded code a script job runs (its input's `code`); None for any other type.
    code: str | None = None
    #: The GPU classes it may run on, in order of preference; () for any card.
    gpu_classes: tuple[str, ...] = ()
    #: The body's `gpu`, as it asked (part of the request's fingerprint); None when not given.
    gpu: GpuNeed | None = None
    #: The cards it takes, all of one class on one host: the body's, else its type's least.
    gpus: int = 1

    def fingerprint(self) -> str:
        """What identifies the request for an Idempotency-Key. A burn job without input keeps
        the original body's fingerprint, so both spellings of it (and keys remembered from
        before types) match; any other job adds its type and a digest of its input, and a
        script job whether it is preemptible (the body's say, not its type's). A body's `gpu`
        adds the need it states, a job of several cards its count (one card adds nothing, so
        keys from before counts still match), and a webhook a digest of its URL."""
        if self.type == BURN and self.input_json == NO_INPUT:
            job = f"{self.kind}:{self.duration_s!r}"
        else:
            digest = hashlib.sha256(self.input_json.encode()).hexdigest()
            job = f"{self.type}:{self.kind}:{self.duration_s!r}:{digest}"
            if self.type == SCRIPT and self.preemptible:
                job = f"{job}:preemptible"
        if self.gpu is not None:
            job = f"{job}:gpu:{self.gpu.fingerprint()}"
        if self.gpus != 1:
            job = f"{job}:gpus:{self.gpus}"
        if self.webhook is None:
            return job
        return f"{job}:webhook:{hashlib.sha256(self.webhook.encode()).hexdigest()}"


def submission(
    body: EnqueueRequest | TypedEnqueueRequest, job_types: Registry, settings: Settings
) -> Submission:
    """The job that body asks for; RequestValidationError or HTTPException (422) when its type is
    unknown or unavailable, its input does not fit the type, or its duration is over the limit."""
    if isinstance(body, EnqueueRequest):
        return _burn(body, job_types, settings)
    job_type = _runnable(job_types, body.type)
    input_json = _checked_input(job_type, body.input)
    kind = body.kind or job_type.queue
    duration_s = _duration(job_type, kind, body.duration_s, settings.max_duration_s(kind))
    preemptible, code = job_type.preemptible, None
    if job_type.name == SCRIPT:
        preemptible = preemptible if body.preemptible is None else body.preemptible
        code = str(body.input["code"])  # the type's model requires it
    elif body.preemptible is not None:
        raise _invalid(
            ("preemptible",),
            "preemptible_not_allowed",
            f"only a script job says whether it is preemptible; type {job_type.name}'s runs "
            f"{'may' if job_type.preemptible else 'may not'} be asked to yield, as its type says",
        )
    gpu_classes = _gpu_classes(job_type, body.gpu, settings)
    return Submission(
        job_type.name,
        input_json,
        kind,
        duration_s,
        body.webhook,
        preemptible,
        code,
        gpu_classes,
        body.gpu,
        _gpus(job_type, body.gpus),
    )


def _gpus(job_type: JobType, asked: int | None) -> int:
    """The cards the job takes: as asked, else its type's least; a 422 naming `gpus` outside
    its type's range (the fleet and the account are checked at submit: routes/jobs.py)."""
    low, high = job_type.gpus
    if asked is None:
        return low
    if not low <= asked <= high:
        cards = f"{low} to {high} cards" if low != high else f"{low} card{'s' * (low > 1)}"
        raise _invalid(
            ("gpus",),
            "gpus_out_of_range",
            f"a job of type {job_type.name} takes {cards}, not {asked}",
        )
    return asked


def _burn(body: EnqueueRequest, job_types: Registry, settings: Settings) -> Submission:
    """The original body's job: what submission() makes of the same job as a typed body (type
    burn, no input), without building and validating that body again: its fields were checked
    as this one's, under the same rules."""
    job_type = _runnable(job_types, BURN)
    input_json = _checked_input(job_type, {})
    limit = settings.max_duration_s(body.kind)
    duration_s = _duration(job_type, body.kind, body.duration_s, limit)
    return Submission(
        job_type.name,
        input_json,
        body.kind,
        duration_s,
        body.webhook,
        job_type.preemptible,
        gpu_classes=_gpu_classes(job_type, None, settings),
        gpus=job_type.gpus[0],  # the short body has no `gpus`: a typed body asks for more
    )


def _gpu_classes(job_type: JobType, body: GpuNeed | None, settings: Settings) -> tuple[str, ...]:
    """The classes the job may run on (app/fleet/needs.py); a 422 naming the field when its
    need names a class the catalog lacks, widens its type's, or no class of the catalog meets
    it."""
    catalog = catalog_of(settings.gpu_classes)
    try:
        return allowed_classes(catalog, job_type.gpu, job_type.min_gpu_memory_gb, body)
    except NeedError as exc:
        raise _invalid(tuple(exc.field.split(".")), exc.kind, exc.message) from None


async def checked_submission(
    body: EnqueueRequest | TypedEnqueueRequest, job_types: Registry, settings: Settings
) -> Submission:
    """submission(), its webhook checked too: a 422 when its URL is not an http(s) one, when this
    deployment sends none, or when its host is an address (or a localhost name) that is not a
    public one (unless WEBHOOK_ALLOW_PRIVATE); a name is resolved by the sender, not here. It
    awaits nothing now, and stays async so that the route's dependency runs on the event loop,
    not in a thread."""
    job = submission(body, job_types, settings)
    if job.webhook is not None:
        _check_webhook(job.webhook, settings)
    return job


def _check_webhook(url: str, settings: Settings) -> None:
    try:  # the URL's form first, whatever the deployment: the schema states it (app/models.py)
        destination.parse(url)
    except destination.RefusedError as exc:
        raise _invalid(("webhook",), exc.kind, exc.reason) from None
    if not _sends_webhooks(settings):
        raise _invalid(
            ("webhook",),
            "webhooks_disabled",
            "this deployment sends no webhooks (its WEBHOOK_SECRET is not set)",
        )
    try:  # no DNS here: the sender resolves the name before each attempt (destination.py)
        destination.at_submit(url, settings.webhook_allow_private)
    except destination.RefusedError as exc:
        raise _invalid(("webhook",), exc.kind, exc.reason) from None


def _sends_webhooks(settings: Settings) -> bool:
    try:
        return signer(settings) is not None
    except ValueError as exc:  # the operator's mistake: said in the log, not to the client
        _log_once(logging.ERROR, "webhooks are off: %s", str(exc))
        return False


def _runnable(job_types: Registry, name: str) -> JobType:
    """The registered type called name, if it can run here."""
    job_type = job_types.get(name)
    if job_type is None:  # the name is not echoed: a 422 never says the input back
        raise _invalid(("type",), "job_type", "unknown job type: GET /job-types lists them")
    reason = job_type.unavailable
    if reason is not None:
        raise _invalid(("type",), "job_type_unavailable", f"this job type {reason}")
    return job_type


def _checked_input(job_type: JobType, raw: dict[str, Any]) -> str:
    """The input as canonical JSON (sorted keys, no spaces), once it fits the type's model."""
    try:
        text = json.dumps(
            raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except ValueError:
        raise _invalid(("input",), "finite_number", "NaN and Infinity are not JSON") from None
    try:
        job_type.parse_input(raw)
    except ValidationError as exc:
        errors = [
            {"type": e["type"], "loc": ("body", "input", *e["loc"]), "msg": e["msg"]}
            for e in exc.errors(include_url=False)
        ]
        raise RequestValidationError(errors) from None
    except Exception as exc:  # a type's validator that raised what pydantic does not catch:
        # the input is what it could not take, so a 422; the operator hears of the type's bug
        _log_once(
            logging.WARNING,
            "job type %s: its input check raised %s",
            job_type.name,
            type(exc).__name__,
        )
        raise _invalid(
            ("input",), "input_unreadable", "the job type cannot read this input"
        ) from None
    return text


#: The lines _log_once has written in this process.
_logged: set[tuple[str, tuple[str, ...]]] = set()


def _log_once(level: int, message: str, *args: str) -> None:
    """A line about the deployment (a type's bug, a bad setting) that a request revealed, written
    once per process: refused requests cannot make the log grow."""
    if (message, args) not in _logged:
        _logged.add((message, args))
        log.log(level, message, *args)


def _duration(job_type: JobType, kind: Kind, asked: float | None, queue_limit: float) -> float:
    """The job's time budget: as asked, else the most it may have, which is the type's own or
    its queue's limit, the lower; a 422 that says which when it asks for more."""
    if job_type.max_duration_s < queue_limit:
        limit, whose = job_type.max_duration_s, f"a job of type {job_type.name}"
    else:
        limit, whose = queue_limit, f"a {kind} job"
    if asked is None:
        return limit
    if asked > limit:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail=f"duration_s must be at most {limit:g} for {whose}",
        )
    return asked


def _invalid(loc: tuple[str, ...], kind: str, message: str) -> RequestValidationError:
    """A 422 in the shape of FastAPI's own, about one field of the body."""
    return RequestValidationError([{"type": kind, "loc": ("body", *loc), "msg": message}])
