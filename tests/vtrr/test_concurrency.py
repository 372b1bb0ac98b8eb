"""Several OS processes on one FairQueue at once: each item is delivered to exactly one of them.

Each process opens its own Redis connection; nothing is shared but the server. They record
what they were served in Redis, and the test process checks the union. They start real
processes, so they are integration tests.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from multiprocessing.process import BaseProcess
from typing import Any

import pytest
import redis

from app.vtrr import FairQueue, Item

LEASE_S = 300  # far longer than the test: no lease may expire, so no item may come back
DEADLINE_S = 60
SERVED = "test:served"
BAD_ACKS = "test:bad-acks"
PRODUCED = "test:produced"
pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def consume(url: str, name: str, start: Any) -> None:
    """Dequeue and ack until the producers are done and nothing is queued; record ids served."""
    r = redis.Redis.from_url(url)
    q = FairQueue(r, name, lease_seconds=LEASE_S)
    served: list[str] = []
    bad = 0
    start.wait(DEADLINE_S)
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        done = r.get(PRODUCED) is not None  # read before dequeue: None after it means drained
        lease = q.dequeue()
        if lease is None:
            if done:
                break
            time.sleep(0.001)  # the producers are still at it
            continue
        served.append(lease.task_id)
        if not q.ack(lease.task_id, lease.token):
            bad += 1
    if served:
        r.rpush(SERVED, *served)
    r.incrby(BAD_ACKS, bad)
    r.close()


def produce(url: str, name: str, start: Any, partitions: list[str], per_partition: int) -> None:
    """Queue per_partition items for each partition, in batches, round-robin across them."""
    r = redis.Redis.from_url(url)
    q = FairQueue(r, name, lease_seconds=LEASE_S)
    start.wait(DEADLINE_S)
    batch = 25
    for first in range(0, per_partition, batch):
        for p in partitions:
            n = min(batch, per_partition - first)
            q.enqueue(p, [Item(f"{p}:{first + i}", id=f"{p}:{first + i}") for i in range(n)])
    r.close()


def context() -> multiprocessing.context.BaseContext:
    """fork while this process runs no other thread (fast, and safe then), else spawn."""
    threads = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []
    single = threading.active_count() == 1 and len(threads) == 1
    return multiprocessing.get_context("fork" if single else "spawn")


@pytest.fixture
def processes() -> Iterator[list[BaseProcess]]:
    started: list[BaseProcess] = []
    yield started
    for p in started:
        if p.is_alive():
            p.kill()
        p.join(10)


def run_all(procs: list[BaseProcess], start: Any) -> None:
    for p in procs:
        p.start()
    start.set()


def join_all(procs: list[BaseProcess]) -> None:
    deadline = time.monotonic() + DEADLINE_S + 10
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    assert [p.exitcode for p in procs] == [0] * len(procs)


def check_each_once(r: redis.Redis, q: FairQueue, expected: set[str]) -> None:
    served = Counter(x.decode() for x in r.lrange(SERVED, 0, -1))
    assert [k for k, n in served.items() if n > 1] == [], "an item was delivered twice"
    assert set(served) == expected
    assert int(r.get(BAD_ACKS) or 0) == 0
    assert (q.length(), q.pending()) == (0, 0)
    stats = q.stats()
    n = len(expected)
    assert (stats["enqueued"], stats["dequeued"], stats["acked"], stats["reclaimed"]) == (
        n,
        n,
        n,
        0,
    )


def test_processes_dequeue_each_item_exactly_once(
    redis_url: str, r: redis.Redis, processes: list[BaseProcess]
) -> None:
    q = FairQueue(r, "contended", lease_seconds=LEASE_S)
    ids: set[str] = set()
    for p in range(8):
        ids.update(q.enqueue(f"p{p}", [Item(f"{p}-{i}") for i in range(250)]))
    assert len(ids) == 2000
    r.set(PRODUCED, 1)

    ctx = context()
    start = ctx.Event()
    processes += [
        ctx.Process(target=consume, args=(redis_url, "contended", start)) for _ in range(4)
    ]
    run_all(processes, start)
    join_all(processes)
    check_each_once(r, q, ids)
    assert r.llen(SERVED) == 2000


def test_processes_enqueue_and_dequeue_at_once(
    redis_url: str, r: redis.Redis, processes: list[BaseProcess]
) -> None:
    q = FairQueue(r, "busy", lease_seconds=LEASE_S)
    ctx = context()
    start = ctx.Event()
    groups = [["a", "b", "c"], ["d", "e"]]
    producers = [
        ctx.Process(target=produce, args=(redis_url, "busy", start, g, 200)) for g in groups
    ]
    consumers = [ctx.Process(target=consume, args=(redis_url, "busy", start)) for _ in range(4)]
    processes += producers + consumers
    run_all(processes, start)
    join_all(producers)
    r.set(PRODUCED, 1)  # every enqueue has returned: consumers stop once the queue is empty
    join_all(consumers)
    expected = {f"{p}:{i}" for g in groups for p in g for i in range(200)}
    check_each_once(r, q, expected)
