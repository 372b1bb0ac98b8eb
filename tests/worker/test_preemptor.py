"""The preemption policy's thread, one tick at a time, on real Redis and real fair queues: it
finds the owed job at the head of a queue, asks the right run to yield (its keys and a message
on YIELDS), asks once per need, drops an ask whose worker is gone, and lets one worker decide
per tick."""

from __future__ import annotations

from collections.abc import Callable

import redis

from app.settings import Settings
from app.store.keys import PREEMPT_HEADS, PREEMPT_LOCK, YIELDS, ask_key, asked_for_key
from app.store.workers import Running
from app.vtrr import Limits
from app.worker.preemption import Preemptor
from app.worker.presence import Presence
from tests.support import wait_for
from tests.worker.support import ALICE, BOB, Worker

NOW_POLICY = {"preempt_after_s": 0.0, "preempt_min_run_s": 0.0}


def even(user_id: str) -> float:
    return 1.0


def busy(r: redis.Redis, worker: str, job: str, account: str = ALICE) -> Presence:
    beats = Presence(r, worker, ["short", "long"], every=1)
    beats.busy(600.0, Running(job, account, "long", preemptible=True))
    return beats


def preemptor(r: redis.Redis, w: Worker, name: str = "gpu0@a") -> Preemptor:
    settings = Settings(**{**w.settings.model_dump(), **NOW_POLICY})
    return Preemptor(r, name, w.service.queues, even, settings)


def test_a_tick_asks_the_run_of_the_account_over_its_share_for_the_owed_job(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker()
    busy(r, "gpu0@a", "A1")
    busy(r, "gpu1@a", "A2")
    w.submit(r, "short", "B1", owner=BOB)
    heard = r.pubsub()
    heard.subscribe(YIELDS)
    assert heard.get_message(timeout=5)["type"] == "subscribe"  # type: ignore[index]

    [ask] = preemptor(r, w).tick()
    assert (ask.owed.job, ask.owed.account, ask.owed.kind) == ("B1", BOB, "short")
    assert ask.victim in {"A1", "A2"}
    assert r.get(ask_key(ask.victim)) == b"B1 short"
    assert r.get(asked_for_key("B1")) == ask.victim.encode()
    message = heard.get_message(timeout=5)
    assert message is not None and message["data"] == ask.victim.encode()
    assert r.hget(PREEMPT_HEADS, "short") is not None  # since when B1 has been next in line
    heard.close()

    r.delete(PREEMPT_LOCK)
    assert preemptor(r, w).tick() == []  # one ask per need


def test_only_one_worker_decides_in_a_tick(worker: Callable[..., Worker], r: redis.Redis) -> None:
    w = worker()
    busy(r, "gpu0@a", "A1")
    busy(r, "gpu1@a", "A2")
    w.submit(r, "short", "B1", owner=BOB)
    assert len(preemptor(r, w, "gpu0@a").tick()) == 1
    assert preemptor(r, w, "gpu1@a").tick() == []  # the lock is the first one's this tick


def test_an_ask_whose_worker_is_gone_is_dropped_and_another_run_is_asked(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker()
    runs = {"gpu0@a": "A1", "gpu1@a": "A2", "gpu2@a": "A3"}
    beats = {name: busy(r, name, job) for name, job in runs.items()}
    w.submit(r, "short", "B1", owner=BOB)
    [first] = preemptor(r, w).tick()
    gone = next(name for name, job in runs.items() if job == first.victim)
    beats[gone].stop()  # its worker stopped: no heartbeat names the run any more
    r.delete(PREEMPT_LOCK)
    [second] = preemptor(r, w).tick()
    assert second.victim != first.victim and second.owed.job == "B1"
    assert not r.exists(ask_key(first.victim))


def test_nothing_is_asked_while_a_worker_serving_the_queue_is_free(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker()
    busy(r, "gpu0@a", "A1")
    busy(r, "gpu1@a", "A2")
    Presence(r, "gpu2@a", ["short"], every=1).beat()  # idle: it will take B1 itself
    w.submit(r, "short", "B1", owner=BOB)
    assert preemptor(r, w).tick() == []


def test_the_thread_ticks_until_it_is_stopped(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker()
    busy(r, "gpu0@a", "A1")
    busy(r, "gpu1@a", "A2")
    w.submit(r, "short", "B1", owner=BOB)
    thread = preemptor(r, w)
    thread.start()
    try:
        wait_for(lambda: r.exists(asked_for_key("B1")), 10, "the thread's ask")
    finally:
        thread.stop()
    assert not thread.running


def test_a_job_held_back_by_its_accounts_limit_is_never_owed(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker()
    queue = w.service.queues["short"]
    w.submit(r, "short", "B0", owner=BOB)
    lease = queue.dequeue()
    assert lease is not None and lease.task_id == "B0"
    busy(r, "gpu0@a", "A1")
    busy(r, "gpu1@a", "A2")
    busy(r, "gpu2@a", "B0", account=BOB)  # Alice 2 of 3, Bob 1: Bob is under his share
    w.submit(r, "short", "B1", owner=BOB)
    queue.set_limits(BOB, Limits(most_in_flight=1))  # ...but may run only one at a time
    assert preemptor(r, w).tick() == []
    queue.set_limits(BOB, Limits())
    r.delete(PREEMPT_LOCK)
    [ask] = preemptor(r, w).tick()
    assert ask.owed.job == "B1" and ask.victim in {"A1", "A2"}
