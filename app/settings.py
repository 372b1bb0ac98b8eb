"""Settings: the only place that reads the environment (pydantic-settings)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, IPvAnyNetwork, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app import settings_checks as checks
from app.models import Kind


class Settings(BaseSettings):
    """Every knob of the service; each field is read from the upper-case environment variable."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Redis for state and broker")
    users_file: Path = Field(
        Path("fixtures/users.json"),
        description="accounts and API keys that seed an empty account store",
    )
    redis_sentinels: Annotated[list[str], NoDecode] = Field(
        [],
        description="host:port of each Redis Sentinel, comma-separated: when set, every process "
        "uses the primary they elect in place of REDIS_URL's server (its database number and "
        "password still apply)",
    )
    redis_sentinel_master: str = Field(
        "fairgpu", min_length=1, description="the name the Sentinels monitor the primary under"
    )
    redis_sentinel_password: SecretStr | None = Field(
        None, description="the Sentinels' own password (requirepass in sentinel.conf), if any"
    )
    redis_min_replicas: int | None = Field(
        None,
        ge=0,
        description="replicas a submit's write must reach before it is answered (Redis WAIT); "
        "default 0, and 1 under Sentinel",
    )
    celery_broker_url: str | None = Field(
        None,
        description="Celery's broker when it is not the state's Redis: amqp://user:password@host"
        ":5672/vhost for RabbitMQ (the fair queues stay in Redis; docs/rabbitmq.md)",
    )
    broker_consumer_timeout_s: float = Field(
        1800,
        gt=0,
        description="RabbitMQ's consumer_timeout, as set on the broker (its default, 30 min): "
        "a worker warns at start when a trigger may be held longer (docs/rabbitmq.md)",
    )
    database_url: str | None = Field(
        None,
        description="SQL database of the accounts and the billing ledger (default: SQLite in "
        "./fairgpu.db; under fairgpu dev, the stack's own folder; PostgreSQL in production)",
    )
    host: str = Field("127.0.0.1", description="address the API listens on")
    port: int = Field(8000, description="port the API listens on")
    api_workers: int = Field(
        1, ge=1, description="API processes sharing the port (uvicorn's workers), one per core"
    )
    embedded_redis_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="port of the Redis that fairgpu dev and scripts/gpu_check.py start of their "
        "own (default: a free one)",
    )
    dev_log_dir: Path | None = Field(
        None,
        description="folder of fairgpu dev's logs, kept after it stops (default: a new folder "
        "per run in the system's temporary folder)",
    )
    lease_seconds: float = Field(
        30, gt=0, description="a job's lease; a dead worker's job returns within it"
    )
    heartbeat_seconds: float = Field(
        10, gt=0, description="how often a running job renews its lease"
    )
    max_attempts: int = Field(3, ge=1, description="runs of a job before it ends as FAILURE")
    max_concurrency: int = Field(8, ge=1, description="triggers waiting in the broker, per queue")
    reclaim_interval_s: float = Field(10, gt=0, description="period of reclaim_and_dispatch")
    drain_max_s: float = Field(
        600, ge=0, description="how long one trigger's run keeps taking jobs (0: one per trigger)"
    )
    shutdown_grace_s: float = Field(
        30,
        ge=0,
        description="on SIGTERM a worker finishes its job if it can within this; else it hands "
        "the job back to the front of its queue, unbilled",
    )
    ledger_claim_s: float = Field(
        30,
        gt=0,
        description="a bill read by a ledger writer that died is written by another after this",
    )
    price_short_per_s: float = Field(
        0.5, ge=0, allow_inf_nan=False, description="price of a GPU-second in the short queue"
    )
    price_long_per_s: float = Field(
        0.25, ge=0, allow_inf_nan=False, description="price of a GPU-second in the long queue"
    )
    min_billed_s: float = Field(
        1.0, ge=0, allow_inf_nan=False, description="least GPU-seconds a bill is for"
    )
    long_every: int = Field(
        4, ge=1, description="a worker serving both queues: long's turn, 1 dispatch in N"
    )
    fair_share_half_life_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="fair share remembers each account's GPU-seconds with this half-life "
        "(unset: an account's past is forgotten once it has nothing queued)",
    )
    max_short_s: float = Field(60, gt=0, description="longest duration_s of a short job")
    max_long_s: float = Field(3000, gt=0, description="longest duration_s of a long job")
    job_ttl_s: int = Field(7 * 86400, gt=0, description="how long a finished job's record is kept")
    idempotency_ttl_s: int = Field(
        86400, gt=0, description="how long an Idempotency-Key is remembered"
    )
    rate_limit_per_s: int = Field(
        100, ge=0, description="requests a second one API key may make (0: no limit)"
    )
    max_queued_per_account: int = Field(
        1000, ge=1, description="jobs one account may have queued in each queue"
    )
    sse_keepalive_s: float = Field(15, gt=0, description="comment line sent on an idle stream")
    sse_outage_s: float = Field(
        30, gt=0, description="how long a stream waits out Redis being away before event: error"
    )
    api_redis_connections: int = Field(
        16, ge=1, description="Redis connections one API process may hold for its requests"
    )
    max_body_bytes: int = Field(64 * 1024, gt=0, description="largest request body accepted")
    worker_queues: Annotated[list[str], NoDecode] = Field(
        ["short", "long"],
        description="queues a worker takes jobs from: short, long or both (comma-separated)",
    )
    job_modules: Annotated[list[str], NoDecode] = Field(
        [],
        description="modules of job types, comma-separated, imported by the API and the workers "
        "(the built-in types and the fairgpu.jobs entry points are always loaded)",
    )
    timeout_grace_s: float = Field(
        5,
        ge=0,
        description="a job still running at its duration_s is asked to stop; this is how long "
        "it has to stop cleanly before it is killed (either way: timeout, billed its duration_s)",
    )
    cancel_grace_s: float = Field(
        5, ge=0, description="a cancelled job that has not stopped after this is killed"
    )
    setup_timeout_s: float = Field(
        300, gt=0, description="a job type's setup() still running after this fails its job"
    )
    preempt_after_s: float = Field(
        300,
        ge=0,
        allow_inf_nan=False,
        description="a job next in line with no free GPU for this long is owed one: a "
        "preemptible run of an account over its share may be asked to yield",
    )
    preempt_min_run_s: float = Field(
        60,
        ge=0,
        allow_inf_nan=False,
        description="the policy's minimum run: a run younger than this is never asked to yield "
        "(a resumed run gets only what is left of its job's duration_s)",
    )
    preempt_grace_s: float = Field(
        30,
        gt=0,
        allow_inf_nan=False,
        description="a run asked to yield that has not ended after this is stopped (SIGTERM, "
        "then SIGKILL) and resumes from its checkpoint",
    )
    child_max_gpu_leak_mb: float | None = Field(
        256,
        ge=0,
        description="GPU memory a job may leave held beyond the child's post-setup baseline "
        "before the child is replaced (unset: never)",
    )
    child_max_rss_mb: float | None = Field(
        None, gt=0, description="a child whose resident memory after a job passes this is replaced"
    )
    child_max_jobs: int | None = Field(
        None, ge=1, description="a child that has run this many jobs is replaced"
    )
    child_per_job: bool = Field(
        False, description="run every job in a fresh child (the strongest isolation)"
    )
    device_probe: str | None = Field(
        None,
        description="module:callable that makes the child's device probe from the GPU id "
        "(default: CUDA's own check; see docs/operations.md)",
    )
    max_log_lines: int = Field(
        10_000, ge=1, description="log lines kept per job (the newest); GET /tasks/{id}/logs"
    )
    log_events_per_s: float = Field(
        4, gt=0, description="log events a job's stream carries a second (lines are batched)"
    )
    artifacts_dir: Path | None = Field(
        None,
        description="folder of the jobs' artifacts (default ./artifacts; under fairgpu dev, the "
        "stack's own folder)",
    )
    artifacts_url: str | None = Field(
        None, description="s3://bucket/prefix: keep artifacts in S3-compatible storage instead"
    )
    artifacts_endpoint_url: str | None = Field(
        None, description="the S3-compatible server's URL, where it is not AWS itself"
    )
    max_artifact_bytes: int = Field(
        1 << 30, gt=0, description="artifacts one job may leave; more ends it as FAILURE"
    )
    max_checkpoint_bytes: int = Field(
        1 << 30, gt=0, description="the checkpoint a run may leave; more ends it as FAILURE"
    )
    max_code_bytes: int = Field(
        100 << 20, gt=0, description="largest archive POST /code takes, packed (docs/scripts.md)"
    )
    max_code_unpacked_bytes: int = Field(
        1 << 30, gt=0, description="bytes an uploaded archive's files may hold, unpacked"
    )
    max_code_members: int = Field(
        20_000, gt=0, description="files and folders an uploaded archive may hold"
    )
    max_code_bytes_per_account: int = Field(
        1 << 30, gt=0, description="packed bytes of code one account may have stored"
    )
    code_ttl_s: float = Field(
        30 * 86400, gt=0, description="uploaded code unused this long is removed"
    )
    script_sandbox: Literal["bwrap", "none"] = Field(
        "bwrap",
        description="how script jobs are confined: bubblewrap, or none (development only: the "
        "script runs as the worker's own user, with its files in reach)",
    )
    script_network: bool = Field(
        False,
        description="whether a script may open connections: never to the host itself or the "
        "service's own hosts (builds always may, so filtered; docs/security.md)",
    )
    script_network_deny: Annotated[list[IPvAnyNetwork], NoDecode] = Field(
        [],
        description="more addresses or CIDR networks a script or build may never reach, "
        "comma-separated (the host's and the service's own are refused already)",
    )
    script_build_hosts: str = Field(
        "", description="host names builds may reach beside the indexes, comma-separated"
    )
    script_base_env: Path | None = Field(
        None,
        description="the environment scripts build on (a venv or prefix with bin/python3); "
        "unset: an empty one on a bare interpreter",
    )
    script_python: Path | None = Field(
        None,
        description="the bare interpreter script environments are made with when "
        "SCRIPT_BASE_ENV is unset (default: uv's system interpreter, or /usr/bin/python3 where "
        "uv's is in a place the sandbox never binds)",
    )
    script_env_cache_dir: Path | None = Field(
        None, description="where this host keeps built script environments (default: a temp one)"
    )
    script_env_cache_bytes: int = Field(
        20 << 30, gt=0, description="bytes of built environments kept per host, LRU out"
    )
    env_build_timeout_s: float = Field(
        900, gt=0, description="an environment build still running after this fails its job"
    )
    script_work_dir: Path | None = Field(
        None,
        description="where each script run's working folder is made (default: fairgpu-scripts "
        "in the system's temporary folder)",
    )
    webhook_secret: SecretStr | None = Field(
        None, description="whsec_<base64>: signs webhooks (Standard Webhooks); unset: no webhooks"
    )
    webhook_allow_private: bool = Field(
        False, description="allow webhooks to private and loopback addresses (tests, one host)"
    )
    webhook_max_attempts: int = Field(
        12, ge=1, description="deliveries of one webhook before it is given up (backoff doubles)"
    )
    worker_name: str = Field(
        "", description="worker name (%h: the host); default <gpuN|cpu>@<host>"
    )
    log_format: Literal["json", "text"] = Field(
        "json", description="API and worker logs: one JSON object per line, or plain text"
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="the least severe log records written"
    )
    access_log: bool = Field(
        False, description="a log line per HTTP request (jobs' events are logged either way)"
    )
    host_gpu_id: int | None = Field(
        None, ge=0, description="the GPU's number on the host, for reports (a container sees 0)"
    )
    gpu_classes: str | None = Field(
        None, description="the GPU catalog, JSON inline or a file's path (app/fleet/catalog.py)"
    )
    worker_host: str | None = Field(None, description="the worker's host; default: the hostname")
    worker_gpu_class: str | None = Field(
        None, description="the worker's class; default: found from its card"
    )
    fleet_ttl_s: float = Field(600, gt=0, description="the fleet: the workers heard within this")
    reservations: bool = Field(True, description="jobs of several GPUs keep reservations")
    reservation_grace_s: float | None = Field(
        None,
        gt=0,
        description="a reservation late by this is placed again (TIMEOUT_GRACE_S + "
        "LEASE_SECONDS at least, the default)",
    )

    _comma_separated = field_validator(
        "worker_queues", "job_modules", "redis_sentinels", "script_network_deny", mode="before"
    )(checks.comma_separated)
    _known_queues = field_validator("worker_queues")(checks.known_queues)
    _host_and_port = field_validator("redis_sentinels")(checks.host_and_port)
    _whole_micro_units = field_validator("price_short_per_s", "price_long_per_s")(
        checks.whole_micro_units
    )
    _gpu_catalog = field_validator("gpu_classes")(checks.gpu_catalog)

    @model_validator(mode="after")
    def _heartbeat_within_lease(self) -> Settings:
        if self.heartbeat_seconds >= self.lease_seconds:
            raise ValueError("HEARTBEAT_SECONDS must be below LEASE_SECONDS, or leases lapse")
        if self.reservation_grace_s is not None and self.reservation_grace_s < self.least_grace:
            raise ValueError(f"RESERVATION_GRACE_S must be at least {self.least_grace:g} s")
        return self

    @property
    def least_grace(self) -> float:
        """A reservation's least grace: a run may overrun its duration by TIMEOUT_GRACE_S, and
        a dead worker's cards come back within LEASE_SECONDS."""
        return self.timeout_grace_s + self.lease_seconds

    @property
    def broker_visibility_s(self) -> float:
        """How long the broker waits for a taken trigger's ack before it hands the trigger to
        another worker: a drain (DRAIN_MAX_S, after which it starts no new job) plus twice the
        longest job, so a running drain's trigger is never handed on (the leases would fence a
        second run anyway)."""
        return self.drain_max_s + 2 * max(self.max_short_s, self.max_long_s)

    @property
    def longest_trigger_hold_s(self) -> float:
        """The longest a worker holds a trigger unacked: a drain, then the job it started last
        (stopped by the timeout at its longest duration plus TIMEOUT_GRACE_S, then killed after
        CANCEL_GRACE_S)."""
        longest_job = max(self.max_short_s, self.max_long_s)
        return self.drain_max_s + longest_job + self.timeout_grace_s + self.cancel_grace_s

    @property
    def amqp_broker(self) -> bool:
        """Whether Celery's broker is RabbitMQ (CELERY_BROKER_URL amqp:// or amqps://)."""
        url = self.celery_broker_url or ""
        return url.split("://", 1)[0] in ("amqp", "amqps", "pyamqp")

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """REDIS_SENTINELS as (host, port) pairs; empty without Sentinel."""
        pairs = [address.rpartition(":") for address in self.redis_sentinels]
        return [(host, int(port)) for host, _, port in pairs]

    @property
    def min_replicas(self) -> int:
        """REDIS_MIN_REPLICAS, or its default: 1 under Sentinel, else 0."""
        if self.redis_min_replicas is not None:
            return self.redis_min_replicas
        return 1 if self.redis_sentinels else 0

    @property
    def database(self) -> str:
        """The SQL database's URL: DATABASE_URL, else SQLite in the working folder."""
        return self.database_url or "sqlite:///fairgpu.db"

    def price_per_s(self, kind: Kind) -> float:
        """The price of one GPU-second of a job of this kind."""
        return self.price_short_per_s if kind == "short" else self.price_long_per_s

    def max_duration_s(self, kind: Kind) -> float:
        """The longest duration a job of this kind may ask for."""
        return self.max_short_s if kind == "short" else self.max_long_s


@lru_cache
def get_settings() -> Settings:
    """The settings of this process, read once; tests build their own Settings instead."""
    return Settings()
