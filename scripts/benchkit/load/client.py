"""The load test's HTTP side: submit the plan (POST /enqueue-task, each job with its own
Idempotency-Key), poll GET /task-status/{id} until every job has ended, and label each job
with the account behind its key. A 429 or 503 is sent again after its Retry-After."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import httpx

from app.models import Status
from scripts.benchkit.host import log
from scripts.benchkit.load.jobs import JobSpec, Options, Outcome, default_timeout, plan_jobs

RETRYABLE = frozenset({429, 503})
MAX_TRIES = 30  # per request; a 429 or 503 waits its Retry-After between tries
MAX_PAUSE_S = 30.0  # the longest Retry-After honoured as given
LOST = "LOST"  # the API answers 404 for the job
ENDED = frozenset({*(s.value for s in Status if s.terminal), LOST})


def retry_after_s(reply: httpx.Response) -> float:
    """The pause a 429 or 503 asks for (Retry-After in seconds), 1 s when it names none."""
    try:
        pause = float(reply.headers.get("Retry-After", "1"))
    except ValueError:
        pause = 1.0  # an HTTP date: not sent by fairgpu
    return min(max(pause, 0.1), MAX_PAUSE_S) if math.isfinite(pause) else 1.0


async def send(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    key: str,
    *,
    body: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> httpx.Response:
    """One request with the key; a 429/503 is sent again after its Retry-After, a network
    error after a growing pause, up to MAX_TRIES tries."""
    headers = {"X-API-Key": key}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    for attempt in range(1, MAX_TRIES + 1):
        try:
            reply = await client.request(method, path, headers=headers, json=body)
        except httpx.TransportError:
            if attempt == MAX_TRIES:
                raise
            await asyncio.sleep(min(0.2 * attempt, 5.0))  # the network, or the API restarting
            continue
        if reply.status_code not in RETRYABLE or attempt == MAX_TRIES:
            return reply
        await asyncio.sleep(retry_after_s(reply))  # as the server asked
    raise AssertionError("unreachable")


def detail_of(reply: httpx.Response) -> str:
    """An error answer's detail, or its status and text."""
    try:
        detail = reply.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return f"HTTP {reply.status_code}: {detail if detail is not None else reply.text[:200]}"


async def submit(
    client: httpx.AsyncClient, spec: JobSpec, run_id: str, gate: asyncio.Semaphore
) -> Outcome:
    """POST one job; its Outcome holds the task id, or the error that refused it."""
    outcome = Outcome(spec.index, spec.key, spec.kind, spec.duration_s)
    body = {"kind": spec.kind, "duration_s": spec.duration_s}
    async with gate:
        try:
            reply = await send(
                client,
                "POST",
                "/enqueue-task",
                spec.key,
                body=body,
                idempotency_key=f"load-{run_id}-{spec.index}",
            )
        except httpx.HTTPError as exc:
            outcome.error = f"submit failed: {exc!r}"
            return outcome
    if reply.status_code == 200:
        outcome.task_id = str(reply.json()["task_id"])
        outcome.status = "PENDING"
    else:
        outcome.error = detail_of(reply)
    return outcome


def absorb(outcome: Outcome, state: dict[str, Any]) -> None:
    """Copy a TaskStatus answer into the outcome."""
    outcome.status = str(state["status"])
    outcome.attempts = int(state.get("attempts") or 0)
    outcome.error = state.get("error")
    result = state.get("result") or {}
    outcome.worker = result.get("worker")
    outcome.gpu_id = result.get("gpu_id")
    outcome.enqueued_at = result.get("enqueued_at")
    outcome.started_at = result.get("started_at")
    outcome.finished_at = result.get("finished_at")


async def refresh(client: httpx.AsyncClient, outcome: Outcome, gate: asyncio.Semaphore) -> None:
    """GET the job's status into its outcome; a 404 ends it as LOST."""
    async with gate:
        try:
            reply = await send(client, "GET", f"/task-status/{outcome.task_id}", outcome.key)
        except httpx.HTTPError as exc:
            outcome.error = f"status failed: {exc!r}"  # kept only if the job never ends
            return
    if reply.status_code == 200:
        absorb(outcome, reply.json())
    elif reply.status_code == 404:
        outcome.status, outcome.error = LOST, detail_of(reply)


def open_jobs(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """The submitted jobs not yet seen ended."""
    return [o for o in outcomes if o.task_id and o.status not in ENDED]


async def wait_all(
    client: httpx.AsyncClient,
    outcomes: Sequence[Outcome],
    gate: asyncio.Semaphore,
    timeout_s: float,
    poll_s: float,
) -> None:
    """Poll the open jobs every poll_s until all have ended or timeout_s has passed; a job
    still open then keeps its last status with a timeout error."""
    deadline = time.monotonic() + timeout_s
    while (waiting := open_jobs(outcomes)) and time.monotonic() < deadline:
        await asyncio.gather(*(refresh(client, o, gate) for o in waiting))
        if open_jobs(outcomes):
            await asyncio.sleep(poll_s)  # a modest interval between status rounds
    for outcome in open_jobs(outcomes):
        outcome.error = f"still {outcome.status} after the {timeout_s:g} s timeout"


async def account_of(client: httpx.AsyncClient, key: str) -> str:
    """The account (user_id) behind a key, read from its newest billing record; the key itself
    when it has none."""
    try:
        reply = await send(client, "GET", "/billing-records?limit=1", key)
    except httpx.HTTPError:
        return key
    records = reply.json() if reply.status_code == 200 else []
    return str(records[0]["user_id"]) if records else key


async def run(opts: Options) -> list[Outcome]:
    """Submit the plan, wait for every job, and label each with its account."""
    plan = plan_jobs(opts)
    run_id = uuid.uuid4().hex[:12]
    gate = asyncio.Semaphore(opts.concurrency)
    limits = httpx.Limits(max_connections=opts.concurrency)
    async with httpx.AsyncClient(base_url=opts.url, timeout=30, limits=limits) as client:
        began = time.monotonic()
        outcomes = list(await asyncio.gather(*(submit(client, s, run_id, gate) for s in plan)))
        accepted = sum(o.task_id is not None for o in outcomes)
        log(f"{accepted}/{len(plan)} jobs accepted in {time.monotonic() - began:.1f} s; waiting")
        timeout_s = opts.timeout if opts.timeout is not None else default_timeout(plan)
        await wait_all(client, outcomes, gate, timeout_s, opts.poll_s)
        accounts = {key: await account_of(client, key) for key in opts.keys}
    for outcome in outcomes:
        outcome.account = accounts[outcome.key]
    log(f"done in {time.monotonic() - began:.1f} s")
    return outcomes
