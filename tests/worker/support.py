"""What the in-process runner tests share: the accounts file, the owner of their jobs, a job
written, queued and leased as the API and a worker's trigger would, and a worker's service whose
triggers the tests run themselves (Worker)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import redis
from pydantic import BaseModel

from app.auth import Accounts
from app.jobs import JobContext, JobType, Registry, job
from app.models import Kind
from app.settings import Settings
from app.store.keys import input_key, job_key
from app.wiring.service import Service
from app.worker.inline import InlineExecutor
from app.worker.runner import build_worker

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "users.json"
OWNER = "11111111-1111-1111-1111-111111111111"


def new_job(
    service: Service,
    r: redis.Redis,
    job_id: str,
    duration_s: float = 0.01,
    job_type: str = "burn",
    job_input: str = "{}",
) -> str:
    """A PENDING job as the API writes it, queued and leased as a worker's trigger would; its
    lease token."""
    r.hset(
        job_key(job_id),
        mapping={
            "task_id": job_id,
            "owner": OWNER,
            "kind": "short",
            "type": job_type,
            "duration_s": repr(duration_s),
            "status": "PENDING",
            "attempts": 0,
            "enqueued_at": 1.0,
        },
    )
    r.set(input_key(job_id), job_input)
    queue = service.queues["short"]
    queue.enqueue(OWNER, [service.job_item("short", job_id, duration_s)])
    lease = queue.dequeue()
    assert lease is not None
    return lease.token


ALICE = OWNER
BOB = "22222222-2222-2222-2222-222222222222"


class Nothing(BaseModel):
    """No input, no output."""


RAN: list[str] = []  # the jobs that the job type below ran, in order


@job(name="noted", queue="long", max_duration_s=3000)
def noted(ctx: JobContext, inp: Nothing) -> Nothing:
    """Only notes which job ran."""
    RAN.append(ctx.task_id)
    return Nothing()


class Worker:
    """A worker's service whose jobs only note that they ran. Each trigger runs one job
    (DRAIN_MAX_S 0), so that what the policy does at each dispatch shows, unless `drain`."""

    def __init__(
        self,
        redis_url: str,
        queues: str = "short,long",
        long_every: int = 4,
        drain: bool = False,
        types: Sequence[JobType] = (),
        **settings: object,
    ) -> None:
        RAN.clear()
        self.ran = RAN
        self.count = 0
        self.settings = Settings(
            redis_url=redis_url,
            users_file=FIXTURES,
            worker_queues=queues,
            long_every=long_every,
            drain_max_s=600 if drain else 0,
            **settings,  # type: ignore[arg-type]
        )  # type: ignore[call-arg]
        executor = InlineExecutor(Registry([noted, *types]))
        self.service: Service = build_worker(
            self.settings, Accounts.load(FIXTURES), executor=executor
        )[0]

    def submit(
        self,
        r: redis.Redis,
        kind: Kind,
        name: str,
        owner: str = ALICE,
        job_type: str = "noted",
        duration_s: float | None = None,
    ) -> None:
        """A job as the API writes and queues it, its task id being its name."""
        duration = (10.0 if kind == "short" else 100.0) + self.count / 1000  # as before types
        duration = duration if duration_s is None else duration_s
        self.count += 1
        fields = {"task_id": name, "owner": owner, "kind": kind, "duration_s": repr(duration)}
        r.hset(
            job_key(name),
            mapping={
                **fields, "type": job_type, "status": "PENDING", "attempts": 0, "enqueued_at": 1.0
            },
        )  # fmt: skip
        r.set(input_key(name), "{}")
        self.service.queues[kind].enqueue(owner, [self.service.job_item(kind, name, duration)])

    def trigger(self, kind: Kind) -> None:
        """Run one trigger of the queue `kind`, as the worker does when Kombu hands it one."""
        self.service.tasks[kind].celery_task.apply()
