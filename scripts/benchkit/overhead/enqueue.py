"""POST /enqueue-task with 16 concurrent clients on one API process, against two baselines.

Variants, in alternating rounds of the same length:

- fairgpu: the real API (app.serve, one uvicorn process) on an embedded Redis; each client uses
  its own account's key, the rate limit and the per-account cap raised out of reach;
- baseline-http: the same server stack with an endpoint that validates the same body and
  answers the same model without touching Redis (scripts/benchkit/overhead/trivial_api.py):
  the floor of HTTP, uvicorn and FastAPI;
- fairgpu-2proc: the same API with API_WORKERS=2, two uvicorn processes on one port: what the
  second core buys (not the target's setup, which is one process);
- handler-only: the enqueue handler's own work (one call: the fair queue's enqueue, with the job
  store's hooks counting the rate and writing the record) called in this process by 16
  concurrent coroutines, no HTTP: the floor of the Redis round trip and the Python around it.

The load generator (scripts/benchkit/overhead/httpload.py) runs in this process, on the same
2 cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from app.api.routes import jobs as jobs_api
from app.api.routing import Caller
from app.api.runtime import Runtime
from app.api.submissions import checked_submission
from app.auth import digest
from app.dev.redis_server import free_port
from app.models import EnqueueRequest
from app.settings import Settings
from scripts.benchkit.children import embedded_redis
from scripts.benchkit.host import log, machine, tree_cpu_seconds
from scripts.benchkit.overhead import httpload
from scripts.benchkit.overhead.apis import Api, baseline_api, fairgpu_api, fairgpu_settings
from scripts.benchkit.report import Report, Section, met
from scripts.benchkit.stats import alternate, median, percentile, ratio

CLIENTS = 16
BODY = b'{"kind": "short", "duration_s": 1}'
VARIANTS = ("fairgpu", "baseline-http", "handler-only", "fairgpu-2proc")
TARGET_RPS, TARGET_P99_MS = 2000.0, 25.0
#: The lean submit's target: this share of the baseline's requests a second, in the same run.
TARGET_RATIO = 0.5


@dataclass(frozen=True)
class Plan:
    """How long to load each round, and how many rounds."""

    rounds: int
    seconds: float
    warmup_s: float


@dataclass
class Rounds:
    """Per variant: each round's result, and the serving process's CPU ms per request."""

    runs: dict[str, list[httpload.LoadResult]] = field(
        default_factory=lambda: {v: [] for v in VARIANTS}
    )
    cpu_ms: dict[str, list[float]] = field(default_factory=lambda: {v: [] for v in VARIANTS})


def requests_for(keys: list[str]) -> Callable[[int, int], bytes]:
    """Client i sends POST /enqueue-task with key i, prebuilt."""
    prebuilt = [
        httpload.request(
            "POST", "/enqueue-task", {"X-API-Key": key, "Content-Type": "application/json"}, BODY
        )
        for key in keys
    ]
    return lambda client, _n: prebuilt[client]


async def handler_only(runtime: Runtime, keys: list[str], seconds: float) -> httpload.LoadResult:
    """16 coroutines doing the enqueue handler's work directly, each as its own account: the
    body's check and the submit."""
    result = httpload.LoadResult()
    body = EnqueueRequest(kind="short", duration_s=1.0)
    deadline = time.perf_counter() + seconds

    async def client(key: str) -> None:
        account = runtime.accounts.authenticate(key)
        assert account is not None
        caller = Caller(account, digest(key))
        while time.perf_counter() < deadline:
            sent = time.perf_counter()
            job = await checked_submission(body, runtime.job_types, runtime.settings)
            await jobs_api.submit(runtime, caller, job, None)
            result.latencies_ms.append((time.perf_counter() - sent) * 1e3)
        result.statuses[200] = len(result.latencies_ms)

    began = time.perf_counter()
    await asyncio.gather(*(client(k) for k in keys))
    result.seconds = time.perf_counter() - began
    return result


async def one_round(
    variant: str, apis: dict[str, Api], runtime: Runtime, keys: list[str], seconds: float
) -> httpload.LoadResult:
    """Load one variant for seconds."""
    if variant == "handler-only":
        return await handler_only(runtime, keys, seconds)
    return await httpload.closed_loop(apis[variant].port, requests_for(keys), CLIENTS, seconds)


async def run_rounds(
    plan: Plan, apis: dict[str, Api], settings: Settings, keys: list[str]
) -> Rounds:
    """Warm every variant up, then the alternating rounds."""
    rounds = Rounds()
    runtime = Runtime.open(settings)
    try:
        for variant in VARIANTS:
            await one_round(variant, apis, runtime, keys, plan.warmup_s)
        for index, variant in alternate(plan.rounds, VARIANTS):
            pid = apis[variant].pid if variant in apis else os.getpid()
            before = tree_cpu_seconds(pid)
            result = await one_round(variant, apis, runtime, keys, plan.seconds)
            rounds.runs[variant].append(result)
            used = tree_cpu_seconds(pid) - before
            rounds.cpu_ms[variant].append(used * 1e3 / max(1, len(result.latencies_ms)))
            log(f"enqueue round {index} {variant}: {result.per_second:,.0f} req/s")
    finally:
        await runtime.close()
    return rounds


def measure(plan: Plan) -> Rounds:
    """Start the servers and APIs, run the rounds, stop everything.

    Each fairgpu variant has a Redis of its own: every API process hears every submit's
    notifications on its Redis, so on a shared one the idle variants' processes would spend CPU
    on the loaded variant's traffic (measured: 0.13 to 0.16 of a core each).
    """
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-enqueue-")))
        servers = [stack.enter_context(embedded_redis(work / f"r{i}")) for i in range(3)]
        settings, keys = fairgpu_settings(servers[0].url, work, CLIENTS)
        one = settings.model_copy(update={"redis_url": servers[1].url})
        two = settings.model_copy(
            update={"redis_url": servers[2].url, "api_workers": 2, "port": free_port()}
        )
        apis = {
            "fairgpu": stack.enter_context(fairgpu_api(one, work / "api.log")),
            "fairgpu-2proc": stack.enter_context(fairgpu_api(two, work / "api-2proc.log")),
            "baseline-http": stack.enter_context(baseline_api(work / "baseline.log")),
        }
        # handler-only runs in this process on the first Redis, which no API process hears.
        return uvloop.run(run_rounds(plan, apis, settings, keys))


def report(rounds: Rounds, plan: Plan) -> Report:
    """Requests/s (median over rounds) and latency percentiles (over all requests)."""
    columns = ("variant", "req/s median", "req/s min", "req/s max", "p50 ms", "p99 ms",
               "CPU ms/req", "requests", "non-2xx")  # fmt: skip
    rows: list[tuple[object, ...]] = []
    summary: dict[str, dict[str, float]] = {}
    for variant, runs in rounds.runs.items():
        rates = [r.per_second for r in runs]
        latencies = [x for r in runs for x in r.latencies_ms]
        errors = sum(n for r in runs for s, n in r.statuses.items() if not 200 <= s < 300)
        p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
        summary[variant] = {"rps": median(rates), "p50": p50, "p99": p99}
        rows.append((variant, median(rates), min(rates, default=0), max(rates, default=0),
                     p50, p99, median(rounds.cpu_ms[variant]), len(latencies), errors))  # fmt: skip
    mine, http, handler, two = (summary[v]["rps"] for v in VARIANTS)
    mine_p99 = summary["fairgpu"]["p99"]
    ok = mine >= TARGET_RPS and mine_p99 <= TARGET_P99_MS
    share = ratio(mine, http)
    share_ok = share >= TARGET_RATIO and mine_p99 <= TARGET_P99_MS
    result = Report("enqueue", [Section(f"POST /enqueue-task, {CLIENTS} clients", columns, rows)])
    result.notes = [
        f"{machine()}; {plan.rounds} rounds of {plan.seconds:g} s per variant",
        f"fairgpu / baseline-http req/s = {ratio(mine, http):.2f};"
        f" fairgpu / handler-only = {ratio(mine, handler):.2f};"
        f" fairgpu-2proc / fairgpu = {ratio(two, mine):.2f}",
        f"target >= {TARGET_RATIO:g}x baseline-http with p99 <= {TARGET_P99_MS:g} ms: "
        f"{share:.2f}x, p99 {mine_p99:.1f} ms: {met(share_ok)}",
        f"target >= {TARGET_RPS:,.0f} req/s with p99 <= {TARGET_P99_MS:g} ms: {mine:,.0f}"
        f" req/s, p99 {mine_p99:.1f} ms: {met(ok)}",
    ]
    result.data = {
        "summary": summary,
        "rates": {v: [r.per_second for r in rs] for v, rs in rounds.runs.items()},
        "cpu_ms": rounds.cpu_ms,
    }
    return result
