"""RunHooks: the job store's hooks on the fair queues (app.vtrr.hooks), so that a submit is one
call to Redis, the enqueue that also counts the key's rate and writes the job's record
(lua/submit.lua), and a worker's path two calls per job: the lease that also starts the job
(start.lua's work), and the step that records the job's end, bills it, credits the account,
acks the lease and leases (and starts) the next (finish.lua's work, then the queue's).
lua/hooks.lua has the Lua; it calls the same functions (lua/runs.lua) as the scripts start.lua
and finish.lua."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from app.settings import Settings
from app.store.keys import (
    CHANNEL,
    LEDGER,
    METRICS,
    MOVES,
    WEBHOOKS,
    billed_key,
    events_key,
    input_key,
    job_key,
    logs_key,
    owned_key,
)
from app.store.scripts import LUA_DIR, constants_lua


@cache
def hooks_lua() -> str:
    """The chunk the queues' enqueue and step run (see lua/hooks.lua): the store's constants and
    helpers, the run functions, the key names, the submit functions, then the hooks."""
    names = {
        "job": job_key(""),
        "events": events_key(""),
        "input": input_key(""),
        "logs": logs_key(""),
        "billed": billed_key(""),
        "owned": owned_key(""),
        "metrics": METRICS,
        "webhooks": WEBHOOKS,
        "ledger": LEDGER,
        "moves": MOVES,
    }
    table = ", ".join(f"{name} = '{key}'" for name, key in names.items())
    parts = ["local KEYS = {}", constants_lua(), _read("_lib"), _read("runs")]
    parts.append(f"local NAMES = {{{table}}}")
    parts += [_read("submit"), _read("hooks")]  # submit.lua reads NAMES
    return "\n".join(parts)


def _read(name: str) -> str:
    return (LUA_DIR / f"{name}.lua").read_text()


class RunHooks:
    """The hooks of a worker's queues: `lease` starts a job as this worker (named by
    for_worker), `done` records how its run ended (JobRecorder.end_args)."""

    def __init__(self, settings: Settings) -> None:
        self._max_attempts, self._ttl = settings.max_attempts, settings.job_ttl_s
        self._worker, self._gpu = "", ""

    @property
    def lua(self) -> str:
        return hooks_lua()

    def for_worker(self, worker: str, gpu_id: int | None) -> None:
        """Start the jobs this process leases as this worker, on this GPU (None: the CPU)."""
        self._worker, self._gpu = worker, "" if gpu_id is None else str(gpu_id)

    def lease_args(self) -> Sequence[str | int]:
        return [self._worker, self._gpu, self._max_attempts, CHANNEL, self._ttl]
