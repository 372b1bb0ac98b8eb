"""Wire shapes of the admin API, apart from app/models.py's: accounts, keys and the audit log
(app/api/routes/accounts.py), and the queues and workers (app/api/routes/admin.py): what admins
send and get back."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.account import Named, Terms
from app.models import Kind

#: An account's id: it names the account in bills, logs and URLs.
USER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$"
#: The terms that are whole numbers, which JSON may send as 5.0.
WHOLE = tuple(name for name, f in Terms.model_fields.items() if int in get_args(f.annotation))


class AccountFields(Terms):
    """What an admin may set on an account: its terms (app/account.py). In an update, a field
    left out is kept, and null clears a quota, a limit or a budget (the default applies: no
    limit, no budget, MAX_QUEUED_PER_ACCOUNT)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator(*WHOLE, mode="before")
    @classmethod
    def _whole_number(cls, value: Any) -> Any:
        # JSON has no integer type of its own: 5.0 is the integer 5 (and true is no number)
        if isinstance(value, float) and not isinstance(value, bool) and value.is_integer():
            return int(value)
        return value


class AccountCreate(AccountFields):
    """POST /admin/accounts."""

    user_id: str = Field(pattern=USER_ID_PATTERN)


class AccountUpdate(AccountFields):
    """PATCH /admin/accounts/{user_id}."""

    disabled: bool = Field(False, description="a disabled account's keys stop working")


class AccountInfo(Terms, Named):
    """An account as admins see it: its id, its terms, its state and its keys. Every field is
    in every answer."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    disabled: bool
    created_at: float
    keys: int = Field(description="its keys that work (not revoked)")


class KeyRequest(BaseModel):
    """POST /admin/accounts/{user_id}/keys."""

    model_config = ConfigDict(extra="forbid", strict=True)

    label: str = Field("", max_length=128, description="what the key is for")


class KeyInfo(BaseModel):
    """An API key as it is kept: never its text."""

    id: str = Field(description="the first 12 hex digits of its SHA-256 digest")
    user_id: str
    label: str
    created_at: float
    revoked_at: float | None


class IssuedKey(KeyInfo):
    """A key just issued: its text is in this answer and nowhere else."""

    key: str = Field(description="the key itself, shown once")


class AuditEntry(BaseModel):
    """One change of an account or a key."""

    id: int
    at: float
    actor: str = Field(description="the admin who made it (or seed)")
    action: str
    target: str = Field(description="the account")
    detail: dict[str, Any]


class AccountQueued(BaseModel):
    """One account's jobs queued in one queue."""

    user_id: str
    queued: int
    held_by_limit: int = Field(
        0,
        description="of them, those its max_running or max_held_gpu_seconds holds back now "
        "(0 while its limits let its next job start)",
    )


class QueueView(BaseModel):
    """One queue, as an operator sees it."""

    name: Kind
    queued: int
    in_flight: int
    workers: int = Field(description="live workers that take jobs from this queue")
    held_by_limit: int = Field(
        0,
        description="of the jobs queued, those their account's max_running or "
        "max_held_gpu_seconds holds back now: no idle worker takes them until the limit lets "
        "(fairgpu_jobs_held_by_limit)",
    )
    fairness_lag_s: float = Field(
        description="GPU-seconds that the least-served account with queued jobs is behind the "
        "most-served one (see docs/operations.md)"
    )
    top_accounts: list[AccountQueued] = Field(description="the accounts with most jobs queued")
    stats: dict[str, int] = Field(description="the fair queue's counters since it was created")


class WorkerView(BaseModel):
    """One worker, as its heartbeat shows it."""

    name: str
    queues: list[str]
    host: str | None = Field(None, description="its host (null: a worker of an older release)")
    gpu_class: str | None = Field(None, description="its class of card; null without a catalog")
    memory_gb: float | None = Field(
        None, description="its class's memory in GB (10^9 bytes); null without a catalog"
    )
    last_seen: float = Field(description="its last heartbeat (Unix seconds, Redis's clock)")
    alive: bool = Field(description="it beat recently and can run jobs")
    busy_until: float | None = Field(
        None, description="when its running job should end (Unix seconds); null when idle"
    )
    broken: str | None = Field(
        None,
        description="why it stopped: its device is unusable (a fresh job child's device probe "
        "failed); null for a healthy worker",
    )


class FleetCount(BaseModel):
    """Workers of the fleet counted (see docs/operations.md)."""

    workers: int = Field(description="heard within FLEET_TTL_S and not broken: the fleet")
    alive: int = Field(description="of them, those that beat recently")
    busy: int = Field(description="of the alive ones, those running a job")


class FleetHost(FleetCount):
    """The workers of one class on one host."""

    host: str | None = Field(description="null: workers of an older release, which say none")
    gpu_class: str | None = Field(description="null without a catalog")
    memory_gb: float | None = Field(description="the class's memory in GB; null without one")


class FleetClass(FleetCount):
    """The workers of one class across the fleet; every class of the catalog has one."""

    gpu_class: str | None = Field(description="null without a catalog")
    memory_gb: float | None = Field(description="the class's memory in GB; null without one")
    price: float | None = Field(
        description="the class's price weight; null for a class the catalog lacks (its "
        "workers started with another GPU_CLASSES)"
    )
    hosts: int = Field(description="the hosts its workers are on")


class FleetView(BaseModel):
    """The fleet: the workers heard within FLEET_TTL_S, by host and by class."""

    ttl_s: float = Field(description="FLEET_TTL_S: a silent worker keeps its place this long")
    hosts: list[FleetHost] = Field(description="one row per host and class, by host")
    classes: list[FleetClass] = Field(description="one row per class, in the catalog's order")


class QueuesView(BaseModel):
    """GET /admin/queues."""

    queues: list[QueueView]
    workers: list[WorkerView] = Field(
        [], description="every worker heard from in the last day, the broken ones included"
    )
    fleet: FleetView | None = Field(
        None, description="the fleet by host and by class (null from a server before it)"
    )


class DropRequest(BaseModel):
    """POST /admin/queues/{name}/drop: the queue's name again, so that no slip drops a queue."""

    model_config = ConfigDict(extra="forbid", strict=True)

    confirm: Kind = Field(description="the queue's name, repeated")


class DropResult(BaseModel):
    """What dropping a queue removed."""

    queue: Kind
    dropped: int = Field(description="jobs that were queued and are now REVOKED, unbilled")
    stopped: int = Field(description="jobs that were running and are now REVOKED, unbilled")
