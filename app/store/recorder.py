"""JobRecorder: the workers' side of the job records: start and finish runs, and write what a
running job reports (log lines, progress), all fenced by the run's lease token."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import redis

from app.bill import Charge
from app.models import ErrorKind, Status
from app.settings import Settings
from app.store.keys import (
    CHANNEL,
    LEDGER,
    METRICS,
    WEBHOOKS,
    billed_key,
    events_key,
    input_key,
    job_channel,
    job_key,
    logs_key,
    usage_key,
)
from app.store.record import JobRecord
from app.store.scripts import Scripts
from app.vtrr.replicated import REPLICA_PATIENCE_S, REPLICA_WAIT_MS, until_replicated
from app.vtrr.wire import as_text

LINES_PER_WRITE = 500  # log lines per script call: a flood of lines goes in several
#: A log line as the worker hands it over: when (Unix seconds), its stream, its text.
Line = tuple[float, str, str]


@dataclass(frozen=True)
class Started:
    """What start() decided: run (with the attempt number, the owner, the asked-for duration,
    the job's type and its input as JSON text, so that the worker needs no second read), or do
    not run."""

    run: bool
    attempt: int = 0
    reason: str = ""
    owner: str = ""
    duration_s: float = 0.0
    type: str = "burn"
    input: str = "{}"
    #: Times the job was preempted before this run, the seconds its earlier runs measured (a
    #: lost run's up to its last checkpoint), and whether its type may be preempted (as it
    #: was when the job was submitted).
    preemptions: int = 0
    ran_s: float = 0.0
    preemptible: bool = False
    #: How many earlier runs ran_s counts (preempted, and lost after a checkpoint).
    ran_runs: int = 0
    #: The time.monotonic() at which the call that leased (and started) it was sent, where the
    #: worker knows it (app/worker/lease.py): its lease runs from no sooner.
    leased_at: float | None = None
    #: The cards this run holds (the worker's own placement of it: a job of several cards'),
    #: which its charges count, a preempted run's and a checkpoint's included.
    gpus: int = 1


@dataclass(frozen=True, kw_only=True)
class RunEnd:
    """How a run of a job ended, as the store records it: the job and its account; the end
    (status, and for one that did not succeed its error_kind: 'exception' for a FAILURE and
    'cancelled' for a REVOKED unless said); the seconds the run measured (what its charge was
    priced from); what it left (the error's text, its output as JSON text, the JSON list of
    the artifacts stored for a SUCCESS, its peaks, the facts the job noted); where it ran;
    and its charge (None bills nothing)."""

    job_id: str
    owner: str
    status: Status
    charge: Charge | None
    seconds: float = 0.0
    error_kind: ErrorKind | None = None
    error: str = ""
    output: str | None = None
    tflops: float | None = None
    peak_gpu_memory_bytes: int | None = None
    peak_rss_bytes: int | None = None
    artifacts: str | None = None
    #: What the job noted of its run (ctx.note), one JSON object; the hash's `facts`.
    facts: str | None = None
    #: Where the run was: its worker's host and class of card (app/fleet/place.py; None: no
    #: catalog), the hash's `host` and `gpu_class`, which the job's result shows.
    host: str | None = None
    gpu_class: str | None = None
    #: A run of several cards: each, in order, as JSON ([{"worker", "gpu_id"}]), the hash's
    #: `devices`; None for a run of one card, which the hash's worker and gpu_id name.
    devices: str | None = None

    def how(self) -> ErrorKind | None:
        """How the run ended where it did not succeed: its error_kind, or the status's."""
        if self.status is Status.SUCCESS:
            return None
        return self.error_kind or ("cancelled" if self.status is Status.REVOKED else "exception")

    def to_lua(self) -> str:
        """The end as lua/runs.lua's finish_run takes it (finish.lua's ARGV[5], the last
        argument of the queues' `done` hook): one JSON object, its fields by name. `job` holds
        what is written on the job's hash as it is, as text (none of what is empty); `bill`,
        where it is billed, the charge (app/bill.py)."""
        job = {
            "error": self.error,
            "error_kind": self.how(),
            "output": self.output,
            "tflops": self.tflops,
            "peak_gpu_memory_bytes": self.peak_gpu_memory_bytes,
            "peak_rss_bytes": self.peak_rss_bytes,
            "artifacts": self.artifacts,
            "facts": self.facts,
            "host": self.host,
            "gpu_class": self.gpu_class,
            "devices": self.devices,
            # the run's seconds where it is billed: the status's runs and ran_s, as the bill
            "run_s": self.seconds if self.charge is not None else None,
        }
        end: dict[str, Any] = {
            "owner": self.owner,
            "status": self.status.value,
            "job": {name: _text(value) for name, value in job.items() if value not in (None, "")},
        }
        if self.charge is not None:
            end["bill"] = self.charge.to_lua()
        # UTF-8 as it is: the Lua keeps the text byte for byte
        return json.dumps(end, ensure_ascii=False, separators=(",", ":"))


#: What a job's owner reads when the service, not the job, failed as the job ended.
INTERNAL_ERROR = (
    "the service failed while it ended this job (an internal error, in the worker's log); "
    "the job's run is billed as it ran"
)


def internal_end(end: RunEnd) -> RunEnd:
    """The end to record in place of one that could not be completed: FAILURE, internal,
    billed as the run was, without what failed (output, artifacts)."""
    return RunEnd(
        job_id=end.job_id,
        owner=end.owner,
        status=Status.FAILURE,
        charge=end.charge,
        seconds=end.seconds,
        error=INTERNAL_ERROR,
        error_kind="internal",
        facts=end.facts,  # what the run noted stands, whoever failed after it
        host=end.host,
        gpu_class=end.gpu_class,
        devices=end.devices,
    )


def started_of(raw: Any) -> Started:
    """start.lua's reply (also what the fair queue's lease hook returns: app/store/hooks.py)."""
    reply = [as_text(x) if isinstance(x, bytes | str) else x for x in raw]
    if reply[0] != "run":
        return Started(run=False, reason=reply[0])
    owner, duration, job_type, job_input, preemptions, ran_s, preemptible = reply[2:9]
    return Started(
        True,
        int(reply[1]),
        owner=owner,
        duration_s=float(duration),
        type=job_type,
        input=job_input,
        preemptions=int(preemptions),
        ran_s=float(ran_s),
        preemptible=preemptible == "1",
        ran_runs=int(reply[9]) if len(reply) > 9 else int(preemptions),
    )


class JobRecorder:
    """Start and finish runs of jobs, on a blocking client."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.redis = client
        self._ttl = settings.job_ttl_s
        self._max_attempts = settings.max_attempts
        self._max_log_lines = settings.max_log_lines
        names = ("start", "finish", "preempt", "progress", "log", "requeue", "began")
        self._scripts = Scripts(client, *names, "checkpointed", "devices")
        #: Replicas that must have a run's end before the API processes hear of it (WAIT).
        self._replicas = settings.min_replicas
        self.patience_s = REPLICA_PATIENCE_S  # how long a short count is tried again

    def get(self, job_id: str) -> JobRecord | None:
        """The job, or None."""
        fields = self.redis.hgetall(job_key(job_id))
        return JobRecord.parse(fields) if fields else None

    def start(self, job_id: str, token: str, worker: str, gpu_id: int | None) -> Started:
        """Mark the job STARTED under this lease, unless it has ended or used its attempts."""
        keys = [job_key(job_id), events_key(job_id), METRICS, input_key(job_id), WEBHOOKS]
        gpu = "" if gpu_id is None else str(gpu_id)
        args: list[str | int] = [job_id, token, worker, gpu, self._max_attempts, CHANNEL, self._ttl]
        return started_of(self._scripts.run("start", keys, args))

    def handed_back(self, job_id: str, token: str) -> bool:
        """Mark a running job PENDING again, its attempt given back, after its worker returned
        the lease `token` to the queue (a shutdown); False when another run holds it already."""
        keys = [job_key(job_id), events_key(job_id)]
        return bool(self._scripts.run("requeue", keys, [job_id, token, CHANNEL, self._ttl, "1"]))

    def preempted(self, job_id: str, token: str, seconds: float, so_far: Charge) -> bool:
        """Put a run that yielded its GPU back in line: the job PENDING again, preempted once
        more, its run's seconds added to its earlier runs' and `so_far` (the charge for all of
        them) kept for an end without another run; not an attempt. False when this run no
        longer holds the job. Under REDIS_MIN_REPLICAS it returns once replicas have it, as
        a run's end does: the lease goes back to the queue only after."""
        keys = [job_key(job_id), events_key(job_id), METRICS]
        channel = "" if self._replicas else CHANNEL
        so_far_json = json.dumps(so_far.to_lua())
        args: list[str | int] = [job_id, token, channel, self._ttl, repr(seconds), so_far_json]
        if not self._replicas:
            return bool(self._scripts.run("preempt", keys, args))
        run = partial(self._scripts.run_replicated, "preempt", keys, args)
        wait = partial(run, METRICS, (self._replicas, REPLICA_WAIT_MS))
        recorded = bool(until_replicated(wait, self._replicas, self.patience_s))
        if recorded:
            self.announce(job_id)
        return recorded

    def checkpointed(self, job_id: str, token: str, seconds: float, so_far: Charge) -> bool:
        """Note on the running job what its run had done by its last whole checkpoint write:
        its seconds, and `so_far`, the charge for all its runs through them, which its bill
        counts if the run is lost (runs.lua lose_run). False when this run no longer holds it."""
        args: list[str | int] = [token, repr(seconds), json.dumps(so_far.to_lua())]
        return bool(self._scripts.run("checkpointed", [job_key(job_id)], args))

    def finish(self, job_id: str, token: str, status: Status, **end: Any) -> bool:
        """Record the run's end, and bill it once with `charge`, whatever the status (None: no
        bill); False when this run no longer holds the job (its lease was reclaimed and another
        run took over, or an operator ended it). `end` holds RunEnd's other fields."""
        return self.record_end(token, RunEnd(job_id=job_id, status=status, **end))

    def record_end(self, token: str, end: RunEnd) -> bool:
        """finish() with the end as one value (what a worker hands the fair queue's step when
        the end goes there: app/store/hooks.py)."""
        job_id = end.job_id
        keys = [job_key(job_id), events_key(job_id), usage_key(end.owner), billed_key(job_id)]
        keys += [METRICS, input_key(job_id), logs_key(job_id), WEBHOOKS, LEDGER]
        args = [job_id, token, *self.end_args(end)]
        if not self._replicas:
            return bool(self._scripts.run("finish", keys, args))
        # A repeat of the finish is refused, so the first reply says whether this run ended it.
        finish = partial(self._scripts.run_replicated, "finish", keys, args)
        wait = partial(finish, METRICS, (self._replicas, REPLICA_WAIT_MS))
        recorded = bool(until_replicated(wait, self._replicas, self.patience_s))
        if recorded:
            self.announce(job_id)
        return recorded

    def announce(self, job_id: str) -> None:
        """Tell the API processes that follow the job that it changed; the scripts do so
        themselves unless replicas must have the change first (then the worker does, after)."""
        if self._replicas:
            self.redis.publish(job_channel(job_id), job_id)

    def end_args(self, end: RunEnd) -> list[str | int]:
        """finish.lua's ARGV from its third (after the job id and token), which the queues'
        `done` hook takes too (app/store/hooks.py): the channel, the records' ttl, the end."""
        # Under replicas the end is announced after WAIT, not by the script (announce).
        channel = "" if self._replicas else CHANNEL
        return [channel, self._ttl, end.to_lua()]

    def count_child_replacement(self, reason: str) -> None:
        """Add one to the replacements of a job child for this reason (see worker/hygiene.py)."""
        self.redis.hincrby(METRICS, f"child_replacements:{reason}", 1)

    def count_artifact_bytes(self, size: int) -> None:
        """Add the bytes of a job's stored artifacts to the metric artifact_bytes."""
        if size > 0:
            self.redis.hincrby(METRICS, "artifact_bytes", size)

    def began(self, job_id: str, token: str) -> bool:
        """The run's job has begun (its type set up): its started_at is now, by Redis's clock;
        False when this run no longer holds the job."""
        return bool(self._scripts.run("began", [job_key(job_id)], [job_id, token]))

    def name_devices(self, job_id: str, token: str, devices: str) -> bool:
        """A run of several cards names them (JSON, as RunEnd.devices) on its job as it starts,
        for its status while it runs; False when this run no longer holds the job."""
        return bool(self._scripts.run("devices", [job_key(job_id)], [job_id, token, devices]))

    def progress(self, job_id: str, token: str, fraction: float, message: str) -> bool:
        """Record the running job's latest progress (the hash's `progress`, and a `progress`
        event); False when this run no longer holds the job."""
        data = json.dumps({"fraction": fraction, "message": message})
        keys = [job_key(job_id), events_key(job_id)]
        return bool(self._scripts.run("progress", keys, [job_id, token, CHANNEL, self._ttl, data]))

    def log(
        self,
        job_id: str,
        token: str,
        lines: Sequence[Line],
        *,
        event: Sequence[Line] | None = None,
        dropped: int = 0,
    ) -> bool:
        """Append lines to the running job's log stream and, given an event's lines, add a
        `log` event of them that says how many lines the throttle left out of it (dropped);
        False when this run no longer holds the job."""
        keys = [job_key(job_id), events_key(job_id), logs_key(job_id), METRICS]
        base: list[str | int] = [job_id, token, CHANNEL, self._ttl, self._max_log_lines]
        chunks = [lines[n : n + LINES_PER_WRITE] for n in range(0, len(lines), LINES_PER_WRITE)]
        for n, chunk in enumerate(chunks or [[]]):
            data = ""  # the event goes with the last chunk, after every line it shows
            if event is not None and n == max(len(chunks) - 1, 0):
                data = json.dumps({"lines": [_line(x) for x in event], "dropped": dropped})
            if not (chunk or data):
                continue
            args = [*base, data, dropped if data else 0, *_flat(chunk)]
            if not self._scripts.run("log", keys, args):
                return False
        return True


def _flat(lines: Sequence[Line]) -> list[str | int]:
    """Lines as the log script's arguments: time, stream, text, then the next line's."""
    return [x for at, stream, text in lines for x in (f"{at:.6f}", stream, text)]


def _line(line: Line) -> dict[str, object]:
    at, stream, text = line
    return {"at": round(at, 6), "stream": stream, "text": text}


def _text(value: str | float) -> str:
    """A value as the job's hash keeps it: a number in its shortest exact form."""
    return value if isinstance(value, str) else repr(value)
