"""A drain's step from one item to the next: one call (step.lua) against two (ack, then a
lease), side by side in one run.

Runs a VTRRQueue's task in this process (`celery_task.apply()`: one trigger's run, which drains
the queue) over `items` no-op items, in alternating rounds, on a throwaway redis-server; the
"two calls" variant swaps drain's step for an ack and a separate lease. What it measures is the
library's own cost per item, without a broker message or a worker process around it.

    uv run python scripts/bench_drain.py [--rounds 6] [--items 2000] [--redis-server PATH]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis
from celery import Celery, Task

from app.dev.redis_server import RedisServer
from app.vtrr import VTRRQueue, drain
from app.vtrr.step import step
from scripts.benchkit.stats import alternate, median, ratio

Step = Callable[..., Any]


def two_calls(vtrr: VTRRQueue, task: Task, taken: Any, more: bool) -> Any:  # type: ignore[type-arg]
    """The step as it was: ack the item, then lease the next, in two calls."""
    queue, delivery = taken
    queue.ack(delivery.task_id, delivery.token)
    vars(task.request).update(vtrr_task_id=None, kwargs={})
    return drain._leased(vtrr, step(vtrr.group.order(vtrr)), time.monotonic()) if more else None


VARIANTS: dict[str, Step] = {"one call": drain._end, "two calls": two_calls}


def measure(url: str, rounds: int, items: int) -> dict[str, list[float]]:
    """Items per second of each variant, one number per round."""
    client = redis.Redis.from_url(url)
    app = Celery("drain-step", broker=url, set_as_current=False)
    queue = VTRRQueue(client, app, name="drain-step", celery_queue="drain_step", max_concurrency=1)

    @queue.task
    def noop(self: Task, index: int) -> None:  # type: ignore[type-arg]
        """Nothing: the step's cost is all there is."""

    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    try:
        for _, name in alternate(rounds, list(VARIANTS)):
            drain._end = VARIANTS[name]  # type: ignore[assignment]
            noop.queue("p", [{"args": [i]} for i in range(items)])
            began = time.perf_counter()
            noop.celery_task.apply()
            rates[name].append(items / (time.perf_counter() - began))
    finally:
        drain._end = VARIANTS["one call"]  # type: ignore[assignment]
        app.close()
        client.close()
    return rates


def main(argv: Sequence[str] | None = None) -> int:
    """Print each variant's median items/s and their ratio."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--redis-server", help="redis-server binary (default: as found)")
    args = parser.parse_args(argv)
    if args.redis_server:
        os.environ["FAIRGPU_REDIS_SERVER"] = args.redis_server
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        rates = measure(server.url, args.rounds, args.items)
    for name, values in rates.items():
        each = ", ".join(f"{v:,.0f}" for v in values)
        print(f"{name}: {median(values):,.0f} items/s (rounds: {each})")
    one, two = (median(rates[name]) for name in VARIANTS)
    print(f"one call / two calls = {ratio(one, two):.2f}")
    return 0
