"""The sender: takes ended jobs off the stream, POSTs each one's status to its webhook, signed,
and retries with backoff until a 2xx or WEBHOOK_MAX_ATTEMPTS (deliveries.py keeps the schedule).

Two loops share one process: intake moves new deliveries into the schedule; dispatch claims what
is due and runs up to CONCURRENCY deliveries at once, shared fairly between accounts (an account
alone holds half of them, and fewer as others have deliveries due: claim.lua), so that one
account's slow or failing receiver holds up no other account's. A delivery is the job's current
status, as GET /task-status answers it, with the job's id as its webhook-id: every attempt
carries the same one, so a receiver can drop a repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import redis.asyncio as aioredis
from redis.exceptions import RedisError
from standardwebhooks import Webhook

from app.settings import Settings
from app.store.keys import job_key
from app.store.record import JobRecord, decode
from app.webhooks import destination
from app.webhooks.deliveries import Claim, Deliveries, Outcome, Settled
from app.webhooks.signing import signed_headers

log = logging.getLogger(__name__)

CONCURRENCY = 16
#: Each step of an attempt (connect, send, the answer's head) may take this long...
TIMEOUT_S = 10.0
#: ...and the whole attempt, name lookup included, this long: well within HOLD_MS.
ATTEMPT_S = 30.0
#: The longest wait between two looks at the stream and the schedule.
IDLE_S = 1.0
RECLAIM_EVERY_S = 5.0
REDIS_RETRY_S = 1.0


@dataclass(frozen=True)
class Attempt:
    """How one attempt went, and why, for the log."""

    outcome: Outcome
    why: str = ""


def http_client() -> httpx.AsyncClient:
    """The client deliveries go out on: no redirects followed (a 3xx is a failed attempt), no
    proxy from the environment, and no connection kept: a request goes to the address its own
    check pinned, never over a connection opened for another name."""
    return httpx.AsyncClient(
        timeout=TIMEOUT_S,
        follow_redirects=False,
        trust_env=False,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


def one_line(text: str) -> str:
    """Text on one line: a log line stays one line."""
    return " ".join(text.split())


class RedisWatch:
    """Says once that Redis is away, and once that it is back."""

    def __init__(self) -> None:
        self.down = False

    async def failed(self, exc: BaseException) -> None:
        if not self.down:
            log.warning("Redis unreachable: %s; waiting for it", one_line(str(exc)))
            self.down = True
        await asyncio.sleep(REDIS_RETRY_S)

    def answered(self) -> None:
        if self.down:
            log.warning("Redis answers again")
            self.down = False


class Sender:
    """One sender process's deliveries."""

    def __init__(
        self,
        settings: Settings,
        client: aioredis.Redis,
        http: httpx.AsyncClient,
        sign: Webhook,
        consumer: str,
    ) -> None:
        self.redis = client
        self.deliveries = Deliveries(client, consumer, settings.webhook_max_attempts)
        self._http = http
        self._sign = sign
        self._allow_private = settings.webhook_allow_private
        self._running: dict[asyncio.Task[None], str] = {}  # each delivery's account
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._redis = RedisWatch()
        self._intake: asyncio.Task[None] | None = None

    def stop(self) -> None:
        """Take no more deliveries; run() returns once those under way have ended."""
        self._stop.set()
        self._wake.set()
        if self._intake is not None:
            # not left to finish its blocking read: what it had read and not yet scheduled is
            # reclaimed by a sender later (RECLAIM_IDLE_MS)
            self._intake.cancel()

    async def run(self) -> None:
        """Deliver until stop()."""
        async with asyncio.TaskGroup() as group:
            self._intake = group.create_task(self._intake_loop())
            group.create_task(self._dispatch_loop())
        if self._running:
            await asyncio.wait(list(self._running), timeout=ATTEMPT_S)

    async def _intake_loop(self) -> None:
        next_reclaim = 0.0
        while not self._stop.is_set():
            try:
                taken = 0
                if time.monotonic() >= next_reclaim:
                    taken += await self.deliveries.reclaim()
                    taken += await self.deliveries.adopt()
                    next_reclaim = time.monotonic() + RECLAIM_EVERY_S
                taken += await self.deliveries.intake(int(IDLE_S * 1000))
            except (RedisError, OSError) as exc:
                await self._redis.failed(exc)
                continue
            self._redis.answered()
            if taken:
                self._wake.set()

    async def _dispatch_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before looking: a wake-up from here on cuts the wait short
            try:
                wait = await self._dispatch()
            except (RedisError, OSError) as exc:
                await self._redis.failed(exc)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def _dispatch(self) -> float:
        """Start the due deliveries there is room for; how long to wait before looking again."""
        free = CONCURRENCY - len(self._running)
        if free <= 0:
            return IDLE_S  # a delivery that ends wakes the loop
        holding = Counter(self._running.values())
        claimed = await self.deliveries.claim(free, CONCURRENCY, holding)
        for claim in claimed.claims:
            task = asyncio.create_task(self._deliver(claim))
            self._running[task] = claim.account
            task.add_done_callback(self._ended)
        if claimed.claims:
            return 0.0  # more may be due
        return IDLE_S if claimed.next_due_s is None else min(IDLE_S, claimed.next_due_s)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)
        self._wake.set()

    async def _deliver(self, claim: Claim) -> None:
        """One attempt at a delivery, and its outcome recorded."""
        try:
            async with asyncio.timeout(ATTEMPT_S):
                attempt = await self._attempt(claim.task_id)
        except TimeoutError:
            attempt = Attempt("failed", f"no answer within {ATTEMPT_S:g} s")
        except Exception:  # a bug must not lose the delivery: it is an attempt that failed
            log.exception("webhook delivery failed", extra={"task_id": claim.task_id})
            attempt = Attempt("failed", "an internal error")
        try:
            settled = await self.deliveries.settle(claim, attempt.outcome)
        except (RedisError, OSError) as exc:
            # unrecorded: the hold runs out and the delivery is tried again
            log.warning("webhook outcome not recorded: %s", one_line(str(exc)))
            return
        _report(claim.task_id, attempt, settled)

    async def _attempt(self, task_id: str) -> Attempt:
        """Send the job's status to its webhook once."""
        fields = decode(await self.redis.hgetall(job_key(task_id)))
        url = fields.get("webhook")
        if not url:
            return Attempt("gone", "the job has expired")
        body = JobRecord.parse(fields).status_view().model_dump_json()
        try:
            target = await destination.check(url, self._allow_private)
        except destination.RefusedError as exc:
            return Attempt("failed", exc.reason)
        return await self._post(target, task_id, body)

    async def _post(self, target: destination.Destination, task_id: str, body: str) -> Attempt:
        url, host, extensions = target.pinned()
        headers = {**signed_headers(self._sign, task_id, body, datetime.now(UTC)), **host}
        try:
            request = self._http.build_request(
                "POST", url, content=body.encode(), headers=headers, extensions=extensions
            )
            response = await self._http.send(request, stream=True)  # the head is all we read
            await response.aclose()
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return Attempt("failed", one_line(f"{type(exc).__name__}: {exc}"))
        if response.is_success:
            return Attempt("delivered")
        return Attempt("failed", f"the receiver answered {response.status_code}")


def _report(task_id: str, attempt: Attempt, settled: Settled) -> None:
    """One log line per attempt."""
    extra = {"task_id": task_id, "attempts": settled.attempts}
    if settled.state == "delivered":
        log.info("webhook delivered", extra=extra)
    elif settled.state == "retry":
        log.warning(
            "webhook attempt failed: %s; next in %g s", attempt.why, settled.pause_s, extra=extra
        )
    elif settled.state == "given_up":
        log.error(
            "webhook given up after %d attempts: %s", settled.attempts, attempt.why, extra=extra
        )
    elif settled.state == "gone":
        log.info("webhook dropped: %s", attempt.why, extra=extra)
