"""VTRRQueue driving real Celery workers: separate worker processes on the test Redis.

The test process queues items and stands in for Beat (it calls reclaim_and_dispatch); workers
started with `celery -A tests.vtrr.celery_worker_app worker` run them. Every wait polls Redis
against a deadline. The vtrr state and the runs the task records live in db 0, the broker in db 1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from app.dev.processes import spawn, wait_until
from app.dev.redis_server import RedisServer, free_port
from tests.vtrr.celery_worker_app import (
    CONFIG_ENV,
    FINISHED_KEY,
    PUBLISHED_KEY,
    RUNS_KEY,
    Config,
    Harness,
    build,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 30.0
BROKER_DB = 1
T = TypeVar("T")


class Cluster:
    """The test's side of one queue: its harness, the workers it started and what they did."""

    def __init__(self, server: RedisServer, r: redis.Redis, tmp_path: Path) -> None:
        self.server = server
        self.r = r
        self.broker = redis.Redis(port=server.port, db=BROKER_DB)
        self.broker_db = BROKER_DB
        self.tmp_path = tmp_path
        self.harness: Harness | None = None
        self.workers: list[tuple[subprocess.Popen[bytes], Path]] = []

    # -- set-up -----------------------------------------------------------------------------------
    def make(
        self,
        *,
        lease_seconds: float = 60,
        max_concurrency: int = 4,
        broker_port: int | None = None,
        broker_db: int = BROKER_DB,
        **task_options: Any,
    ) -> Harness:
        """broker_db 0 is the queue's own database: the scripts then push the triggers."""
        tag = uuid.uuid4().hex[:8]
        if broker_db != self.broker_db:
            self.broker.close()
            self.broker = redis.Redis(port=self.server.port, db=broker_db)
            self.broker_db = broker_db
        config = Config(
            broker_url=f"redis://127.0.0.1:{broker_port or self.server.port}/{broker_db}",
            vtrr_url=self.server.url,
            name=f"q-{tag}",
            celery_queue=f"cq-{tag}",
            task_name=f"job_{tag}",
            lease_seconds=lease_seconds,
            max_concurrency=max_concurrency,
            task_options=task_options,
        )
        self.harness = build(config)
        return self.harness

    @property
    def h(self) -> Harness:
        assert self.harness is not None, "call make() first"
        return self.harness

    def start_worker(self, pool: str = "prefork", concurrency: int = 1) -> subprocess.Popen[bytes]:
        """A worker on the queue's Celery queue, in a process group of its own."""
        n = len(self.workers)
        log = self.tmp_path / f"worker{n}.log"
        env = {
            **os.environ,
            CONFIG_ENV: self.h.config.to_env(),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        args = [
            sys.executable, "-m", "celery", "-A", "tests.vtrr.celery_worker_app", "worker",
            "-Q", self.h.config.celery_queue, "-c", str(concurrency), "--pool", pool,
            "-n", f"w{n}-{self.h.config.task_name}@localhost",
            "--without-heartbeat", "--without-mingle", "--without-gossip", "-l", "warning",
        ]  # fmt: skip
        process = spawn(args, env, log, cwd=ROOT, new_session=True)
        self.workers.append((process, log))
        return process

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL a worker and its pool children, as a crash or an OOM kill would."""
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def close(self) -> None:
        for process, _ in self.workers:
            self.kill(process)
        if self.harness is not None:
            self.harness.close()
        self.broker.close()

    # -- observation ------------------------------------------------------------------------------
    def runs(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.r.lrange(RUNS_KEY, 0, -1)]

    def counter(self, key: str) -> int:
        return int(self.r.get(key) or 0)

    def depth(self) -> int:
        """Trigger messages waiting in the broker's list for the queue."""
        return int(self.broker.llen(self.h.config.celery_queue))

    def triggers_counted(self) -> int:
        return int(self.r.get(self.h.vtrr.keys.triggers) or 0)

    def quiet(self, unpublished: int = 0) -> bool:
        """Every message published (plus unpublished copies) has been run, none waits."""
        finished = self.counter(FINISHED_KEY)
        return finished == self.counter(PUBLISHED_KEY) + unpublished and self.depth() == 0

    def drained(self) -> bool:
        """Nothing queued, leased or waiting in the broker: whichever way triggers were sent."""
        vtrr = self.h.vtrr
        counts = (vtrr.length(), vtrr.pending(), self.depth(), self.triggers_counted())
        return counts == (0, 0, 0, 0)

    def wait_for(self, condition: Callable[[], T], what: str, timeout: float = WAIT_S) -> T:
        """condition()'s first truthy value; past the timeout, a failure showing the cluster."""
        try:
            return wait_until(condition, timeout, what)
        except TimeoutError as timed_out:
            raise AssertionError(f"{timed_out}\n{self.report()}") from None

    def wait_past_lease(self, task_id: str) -> None:
        """Wait until Redis's clock has passed the item's lease expiry."""
        expiry = self.h.vtrr.expiry(task_id)
        assert expiry is not None, f"{task_id} is not in flight"
        self.wait_for(lambda: redis_now(self.r) > expiry, f"the lease of {task_id} to expire")

    def report(self) -> str:
        lines = [
            f"stats={self.h.vtrr.stats()} length={self.h.vtrr.length()} "
            f"pending={self.h.vtrr.pending()} depth={self.depth()} "
            f"published={self.counter(PUBLISHED_KEY)} finished={self.counter(FINISHED_KEY)}",
            *(json.dumps(run) for run in self.runs()),
        ]
        for process, log in self.workers:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            lines.append(f"--- worker pid {process.pid} rc={process.poll()}:\n{tail}")
        return "\n".join(lines)

    def assert_drained(self, acked: int) -> None:
        """Nothing queued, in flight or counted as a waiting trigger; acked items in all."""
        q = self.h.vtrr
        assert (q.length(), q.pending(), self.depth(), self.triggers_counted()) == (0, 0, 0, 0)
        assert q.stats()["acked"] == acked
        assert list(self.r.scan_iter(f"{q.keys.item}*")) == []  # no item left behind


def redis_now(r: redis.Redis) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6


def items(mode: str, *keys: str) -> list[dict[str, Any]]:
    return [{"id": key, "args": [mode, key]} for key in keys]


@pytest.fixture
def cluster(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(redis_server, r, tmp_path)
    yield c
    c.close()


#: The broker in another database (triggers published by Kombu), or in the queue's own (pushed
#: by the scripts).
BOTH_WAYS = pytest.mark.parametrize("broker_db", [BROKER_DB, 0], ids=["published", "pushed"])


@BOTH_WAYS
def test_items_of_two_partitions_all_run_once_in_fair_order(
    cluster: Cluster, broker_db: int
) -> None:
    h = cluster.make(max_concurrency=2, broker_db=broker_db)
    a = [f"a{i}" for i in range(6)]
    b = [f"b{i}" for i in range(4)]
    assert h.task.queue("A", items("ok", *a)) == a
    assert h.task.queue("B", items("ok", *b)) == b
    assert cluster.depth() == 2
    cluster.start_worker()

    cluster.wait_for(cluster.drained, "every item to be run")
    runs = cluster.runs()
    # One worker process runs one trigger at a time, so the runs are in dequeue order: fair.
    fair = ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3", "a4", "a5"]
    assert [run["key"] for run in runs] == fair
    assert all(run["timeouts"] == 0 and run["vtrr_task_id"] == run["key"] for run in runs)
    cluster.assert_drained(acked=10)
    assert h.vtrr.stats()["dequeued"] == 10


def test_a_task_that_raises_is_acked_and_not_redelivered(cluster: Cluster) -> None:
    h = cluster.make(lease_seconds=60)
    h.task.queue("A", [*items("fail", "bad"), *items("ok", "good")])
    cluster.start_worker()

    cluster.wait_for(cluster.quiet, "every trigger to be run")
    assert [(run["key"], run["timeouts"]) for run in cluster.runs()] == [("bad", 0), ("good", 0)]
    cluster.assert_drained(acked=2)
    # Nothing is left in flight for a lease to expire on, so nothing can come back.
    assert h.vtrr.reclaim_and_dispatch() == 0
    assert h.vtrr.stats()["reclaimed"] == 0


def test_retry_keeps_the_lease_and_acks_once(cluster: Cluster) -> None:
    h = cluster.make()
    # The key goes as a kwarg: the retry message carries the lease, the item's kwargs come back
    # from the queue.
    h.task.queue("A", [{"id": "r", "args": ["retry"], "kwargs": {"key": "r"}}])
    cluster.start_worker()

    cluster.wait_for(lambda: cluster.counter(PUBLISHED_KEY) == 2 and cluster.quiet(), "the retry")
    first, second = cluster.runs()
    assert (first["key"], first["retries"]) == ("r", 0)
    assert (second["key"], second["retries"]) == ("r", 1)
    # The retry resumed the lease of the first run: same item, same token, no new dequeue.
    assert second["vtrr_task_id"] == first["vtrr_task_id"] == "r"
    assert second["token"] == first["token"]
    assert first["timeouts"] == second["timeouts"] == 0
    cluster.assert_drained(acked=1)
    stats = h.vtrr.stats()
    assert (stats["dequeued"], stats["acked"], stats["reclaimed"]) == (1, 1, 0)


def test_autoretry_for_keeps_the_lease_until_retries_run_out(cluster: Cluster) -> None:
    h = cluster.make(autoretry_for=["ValueError"], retry_kwargs={"countdown": 0}, max_retries=2)
    h.task.queue("A", [*items("flaky", "flaky"), *items("fail", "doomed")])
    cluster.start_worker()

    # Triggers 2, retries 1 (flaky) + 2 (doomed, then out of retries: a failure).
    cluster.wait_for(lambda: cluster.counter(PUBLISHED_KEY) == 5 and cluster.quiet(), "retries")
    runs = cluster.runs()
    by_key = {key: [run for run in runs if run["key"] == key] for key in ("flaky", "doomed")}
    assert [run["retries"] for run in by_key["flaky"]] == [0, 1]
    assert [run["retries"] for run in by_key["doomed"]] == [0, 1, 2]
    for key_runs in by_key.values():
        assert len({run["token"] for run in key_runs}) == 1  # one lease throughout
        assert {run["timeouts"] for run in key_runs} == {0}
    stats = h.vtrr.stats()
    assert (stats["dequeued"], stats["acked"], stats["reclaimed"]) == (2, 2, 0)
    cluster.assert_drained(acked=2)


def test_a_retry_whose_lease_was_reclaimed_is_dropped(cluster: Cluster) -> None:
    h = cluster.make()
    h.task.queue("A", items("retry_late", "late"))
    cluster.start_worker()

    first = cluster.wait_for(cluster.runs, "the first run")[0]
    cluster.wait_for(lambda: cluster.counter(PUBLISHED_KEY) == 2, "the retry to be published")
    # While the retry waits out its countdown, the lease runs out (now, rather than after
    # lease_seconds) and Beat reclaims the item.
    assert h.vtrr.extend("late", first["token"], 1e-6)
    cluster.wait_past_lease("late")
    assert h.vtrr.reclaim_and_dispatch() == 1
    cluster.wait_for(lambda: h.vtrr.stats()["acked"] == 1, "the reclaimed item to run")
    # The retry comes due (RETRY_LATE_S after the first run) once the new delivery has been
    # acked; it must not run the item a third time.
    cluster.wait_for(lambda: cluster.counter(PUBLISHED_KEY) == 3 and cluster.quiet(), "the retry")
    runs = cluster.runs()
    assert [(run["key"], run["timeouts"], run["retries"]) for run in runs] == [
        ("late", 0, 0),
        ("late", 1, 0),
    ]
    cluster.assert_drained(acked=1)


@BOTH_WAYS
def test_a_killed_worker_s_item_is_reclaimed_and_run_by_another(
    cluster: Cluster, broker_db: int
) -> None:
    h = cluster.make(lease_seconds=2, broker_db=broker_db)
    h.task.queue("A", items("block", "k"))
    doomed = cluster.start_worker(pool="solo")
    first = cluster.wait_for(cluster.runs, "the item to start")[0]
    assert h.vtrr.pending() == 1
    cluster.kill(doomed)
    cluster.start_worker()

    expiry = h.vtrr.expiry("k")
    assert expiry is not None
    if redis_now(cluster.r) < expiry - 0.5:  # while the lease lives, nothing is reclaimed
        assert h.vtrr.reclaim_and_dispatch() == 0
        assert (h.vtrr.pending(), h.vtrr.length(), cluster.depth()) == (1, 0, 0)
    cluster.wait_past_lease("k")
    assert h.vtrr.reclaim_and_dispatch() == 1  # Beat's job: reclaim, then wake a worker

    cluster.wait_for(lambda: h.vtrr.stats()["acked"] == 1, "the second worker to run the item")
    second = cluster.runs()[1]
    assert (second["key"], second["timeouts"]) == ("k", 1)
    assert second["pid"] != first["pid"]
    assert second["token"] != first["token"]
    assert len(cluster.runs()) == 2
    stats = h.vtrr.stats()
    assert (stats["dequeued"], stats["reclaimed"], stats["acked"]) == (2, 1, 1)
    cluster.wait_for(lambda: cluster.depth() == 0, "the broker to empty")
    cluster.assert_drained(acked=1)


def test_system_exit_is_not_acked_and_is_reclaimed(cluster: Cluster) -> None:
    h = cluster.make(lease_seconds=2)
    h.task.queue("A", items("exit", "x"))
    worker = cluster.start_worker(pool="prefork")

    cluster.wait_for(lambda: cluster.counter(FINISHED_KEY) == 1, "the run that exits")
    assert h.vtrr.stats()["acked"] == 0
    assert h.vtrr.pending() == 1
    cluster.wait_past_lease("x")
    assert h.vtrr.reclaim_and_dispatch() == 1

    cluster.wait_for(lambda: h.vtrr.stats()["acked"] == 1, "the reclaimed item to run")
    first, second = cluster.runs()
    assert (first["key"], first["timeouts"]) == ("x", 0)
    assert (second["key"], second["timeouts"]) == ("x", 1)
    assert worker.poll() is None  # the pool replaced its child; the worker lives on
    cluster.wait_for(cluster.quiet, "every trigger to be run")
    cluster.assert_drained(acked=1)


def test_a_hard_time_limit_keeps_the_lease_and_the_item_comes_back(cluster: Cluster) -> None:
    h = cluster.make(lease_seconds=2, time_limit=1)
    h.task.queue("A", items("block", "slow"))
    worker = cluster.start_worker(pool="prefork")

    first = cluster.wait_for(cluster.runs, "the item to start")[0]
    cluster.wait_past_lease("slow")  # the pool killed the run after 1 s; nothing acked it
    assert h.vtrr.stats()["acked"] == 0
    assert h.vtrr.reclaim_and_dispatch() == 1

    cluster.wait_for(lambda: h.vtrr.stats()["acked"] == 1, "the reclaimed item to run")
    second = cluster.runs()[1]
    assert (second["key"], second["timeouts"]) == ("slow", 1)
    assert second["pid"] != first["pid"]
    assert worker.poll() is None
    cluster.wait_for(lambda: cluster.depth() == 0, "the broker to empty")
    cluster.assert_drained(acked=1)


@BOTH_WAYS
def test_max_concurrency_caps_the_triggers_waiting_in_the_broker(
    cluster: Cluster, broker_db: int
) -> None:
    h = cluster.make(max_concurrency=3, broker_db=broker_db)
    h.task.queue("A", items("ok", *(f"a{i}" for i in range(30))))
    h.task.queue("B", items("ok", *(f"b{i}" for i in range(20))))
    assert cluster.depth() == 3
    assert h.vtrr._broker_depth() == 3  # the broker's own count, as reclaim_and_dispatch reads it
    assert cluster.counter(PUBLISHED_KEY) == cluster.triggers_counted() == 3

    h.task.queue("C", items("ok", *(f"c{i}" for i in range(50))))
    assert h.vtrr.reclaim_and_dispatch() == 0
    assert cluster.depth() == 3
    assert cluster.counter(PUBLISHED_KEY) == 3
    assert h.vtrr.length() == 100


def test_lost_triggers_are_restored_by_reclaim_and_dispatch(cluster: Cluster) -> None:
    h = cluster.make(max_concurrency=3)
    keys = [f"i{i}" for i in range(10)]
    h.task.queue("A", items("ok", *keys))
    assert cluster.depth() == 3
    cluster.broker.delete(h.config.celery_queue)  # a purge, or workers that died holding them
    assert cluster.depth() == 0

    assert h.vtrr.reclaim_and_dispatch() == 3
    assert cluster.depth() == 3
    assert h.vtrr.reclaim_and_dispatch() == 0  # the broker already holds max_concurrency
    assert cluster.depth() == 3
    cluster.start_worker()

    # The three deleted triggers were published and never run.
    cluster.wait_for(lambda: cluster.quiet(unpublished=-3), "every trigger to be run")
    assert sorted(run["key"] for run in cluster.runs()) == sorted(keys)
    cluster.assert_drained(acked=10)


def test_a_trigger_delivered_twice_runs_no_item_twice(cluster: Cluster) -> None:
    h = cluster.make(max_concurrency=1)
    keys = [f"i{i}" for i in range(6)]
    h.task.queue("A", items("ok", *keys))
    queue = h.config.celery_queue
    assert cluster.depth() == 1
    # The very same message twice (a redelivery), and extra triggers published on top.
    cluster.broker.lpush(queue, cluster.broker.lindex(queue, 0))
    for _ in range(3):
        h.task.celery_task.apply_async(queue=queue)
    assert cluster.depth() == 5
    cluster.start_worker(concurrency=2)

    cluster.wait_for(lambda: cluster.quiet(unpublished=1), "every trigger to be run")
    ran = Counter(run["key"] for run in cluster.runs())
    assert ran == dict.fromkeys(keys, 1)
    stats = h.vtrr.stats()
    assert (stats["dequeued"], stats["acked"], stats["reclaimed"]) == (6, 6, 0)
    cluster.assert_drained(acked=6)


def test_triggers_not_sent_while_the_broker_is_down_are_sent_later(
    cluster: Cluster, tmp_path: Path
) -> None:
    port = free_port()
    h = cluster.make(max_concurrency=2, broker_port=port)
    h.app.conf.broker_connection_timeout = 1
    # Nothing listens on the broker's port: the items are queued all the same, no trigger counted.
    assert h.task.queue("A", items("ok", "x", "y", "z")) == ["x", "y", "z"]
    assert h.vtrr.length() == 3
    assert cluster.triggers_counted() == 0

    with RedisServer(tmp_path / "broker", port=port):
        assert h.vtrr.reclaim_and_dispatch() == 2
        broker = redis.Redis(port=port, db=BROKER_DB)
        try:
            assert broker.llen(h.config.celery_queue) == 2
        finally:
            broker.close()
    assert cluster.triggers_counted() == 2
