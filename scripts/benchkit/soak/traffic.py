"""The soak's traffic: jobs submitted over HTTP at a steady rate from the soak's accounts, the
wait until Redis shows every one ended, and each job's state read back as its owner sees it."""

from __future__ import annotations

import argparse
import contextlib
import random
import time
from typing import Any

import httpx
import redis

from app.dev import processes
from app.models import Status
from app.store.keys import job_key
from scripts.benchkit.soak.checks import ACCOUNTS, Findings

POLL_S = 0.2  # between looks at the jobs' statuses while they drain


def polite(client: httpx.Client, method: str, path: str, key: str, **kwargs: Any) -> httpx.Response:
    """Send a request with the key; a 429 (over the key's rate limit) is sent again after a
    pause, for up to 30 s."""
    deadline = time.monotonic() + 30
    while True:
        reply = client.request(method, path, headers={"X-API-Key": key}, **kwargs)
        if reply.status_code != 429 or time.monotonic() > deadline:
            return reply
        time.sleep(0.2)  # over the key's rate limit: a polite client waits before retrying


def submit_all(
    url: str, args: argparse.Namespace, rng: random.Random, found: Findings
) -> dict[str, str]:
    """Submit the jobs at the chosen rate; task id -> API key of each accepted one."""
    accepted: dict[str, str] = {}
    start = time.monotonic()
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(args.jobs):
            key = rng.choice(list(ACCOUNTS))
            kind = "long" if rng.random() < args.long_share else "short"
            body = {"kind": kind, "duration_s": round(rng.uniform(args.min_s, args.max_s), 3)}
            try:
                reply = polite(client, "POST", "/enqueue-task", key, json=body)
            except httpx.HTTPError:
                found.refused += 1
                continue
            if reply.status_code == 200:
                accepted[reply.json()["task_id"]] = key
            else:
                found.refused += 1
            pause = start + (i + 1) / args.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)  # pacing the submissions, not waiting for a condition
    return accepted


def wait_until_ended(r: redis.Redis, task_ids: list[str], timeout: float) -> None:
    """Wait until Redis shows every job ended; those still open at the timeout are left for
    the checks to report as lost."""
    waiting = list(task_ids)

    def all_ended() -> bool:
        nonlocal waiting
        pipe = r.pipeline(transaction=False)
        for task_id in waiting:
            pipe.hget(job_key(task_id), "status")
        statuses = pipe.execute()
        waiting = [
            t for t, s in zip(waiting, statuses, strict=True) if not (s and Status(s).terminal)
        ]
        return not waiting

    with contextlib.suppress(TimeoutError):
        processes.wait_until(all_ended, timeout, "the soak's jobs", every=POLL_S)


def states_of(url: str, accepted: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each accepted job's state as its owner sees it (GET /task-status/{id})."""
    states: dict[str, dict[str, Any]] = {}
    with httpx.Client(base_url=url, timeout=30) as client:
        for task_id, key in accepted.items():
            reply = polite(client, "GET", f"/task-status/{task_id}", key)
            states[task_id] = (
                reply.json()
                if reply.status_code == 200
                else {"status": f"HTTP {reply.status_code}", "error": reply.text[:200]}
            )
    return states
