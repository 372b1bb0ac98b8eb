"""What the in-process runner tests share: the accounts file, the owner of their jobs, and a job
written, queued and leased as the API and a worker's trigger would."""

from __future__ import annotations

from pathlib import Path

import redis

from app.service import Service
from app.store.keys import input_key, job_key

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
