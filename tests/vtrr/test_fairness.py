"""The order in which the fair queue serves partitions."""

from __future__ import annotations

import heapq
import itertools
import random

import pytest
import redis

from app.vtrr import FairQueue, Item, Lease
from tests.vtrr.helpers import drain, fill, take


def test_light_partition_is_served_within_heavy_ones_first_three(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 10)
    fill(q, "B", 2)
    served = drain(q)
    assert served[:4] == ["A0", "B0", "A1", "B1"]
    assert served[4:] == [f"A{i}" for i in range(2, 10)]


def test_light_partition_goes_next_however_deep_the_backlog(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    for _ in range(10):
        fill(q, "heavy", 100)
    first = take(q)
    assert first.payload == "heavy0"
    fill(q, "light", 2)
    assert take(q).payload == "light0"
    assert take(q).payload == "heavy1"
    assert take(q).payload == "light1"


def test_light_partition_arriving_late_still_goes_next(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "heavy", 50)
    for i in range(20):
        assert take(q).payload == f"heavy{i}"
    fill(q, "light", 1)
    assert take(q).payload == "light0"


def test_weight_spaces_out_a_partitions_items(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "big", 3, weight=3)
    fill(q, "small", 6, weight=1)
    served = drain(q)
    # big's items start at virtual times 0, 3, 6; small's at 0..5; ties in arrival order.
    assert served == ["big0", "small0", "small1", "small2", "big1", "small3", "small4"] + [
        "small5",
        "big2",
    ]


def test_share_two_gets_twice_the_service(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs", shares={"gold": 2})
    fill(q, "gold", 20)
    fill(q, "plain", 20)
    first_30 = drain(q)[:30]
    golds = sum(p.startswith("gold") for p in first_30)
    assert golds == 20  # all of gold's 20 fit in the time plain gets 10
    assert sum(p.startswith("plain") for p in first_30) == 10


def test_callable_share_is_asked_per_partition(r: redis.Redis) -> None:
    asked: list[str] = []

    def share(partition: str) -> float:
        asked.append(partition)
        return 3.0 if partition == "team" else 1.0

    q = FairQueue(r, "jobs", shares=share)
    fill(q, "team", 6)
    fill(q, "solo", 2)
    assert drain(q) == ["team0", "solo0", "team1", "team2", "team3", "solo1", "team4", "team5"]
    assert asked == ["team", "solo"]


def test_equal_virtual_times_leave_in_arrival_order_not_id_order(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    for partition, task_id in [("p1", "zzz"), ("p2", "mmm"), ("p3", "aaa")]:
        q.enqueue(partition, [Item(partition, id=task_id)])
    assert drain(q) == ["p1", "p2", "p3"]


def test_drained_queue_starts_its_virtual_clock_again(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "A", 5)
    drain(q)
    fill(q, "B", 1)
    fill(q, "A", 1)
    assert drain(q) == ["B0", "A0"]
    for part in ("current_virtual_time", "partition_virtual_time", "partition_queued"):
        assert not r.exists(getattr(q.keys, part))
    assert not r.exists(q.keys.idle_partitions)


def test_partition_state_stays_small_under_a_backlog_that_never_drains(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "heavy", 200)
    for i in range(1000):
        fill(q, f"visitor{i}", 1)  # each visitor comes once, is served, and never returns
        take_and_ack = take(q)
        assert q.ack(take_and_ack.task_id, take_and_ack.token)
    assert q.length() == 200
    # Visitors are served at the current virtual time, so it stands still and none of them is
    # ever passed by it; the cap on idle partitions bounds them all the same.
    assert r.hlen(q.keys.partition_queued) == 2  # heavy, and the visitor still waiting
    assert r.zcard(q.keys.idle_partitions) <= 64 + 2
    assert r.hlen(q.keys.partition_virtual_time) <= 64 + 2 + 2


def test_idle_partitions_are_forgotten_once_the_clock_passes_them(r: redis.Redis) -> None:
    q = FairQueue(r, "jobs")
    fill(q, "heavy", 300)
    for i in range(100):
        fill(q, f"visitor{i}", 1)
        for _ in range(2):  # the visitor and one heavy item: the virtual time moves on
            lease = take(q)
            assert q.ack(lease.task_id, lease.token)
    assert r.zcard(q.keys.idle_partitions) <= 1
    assert r.hlen(q.keys.partition_virtual_time) <= 2


def serve_with_workers(
    q: FairQueue, used_of: dict[str, int], workers: int, *, credit: bool, keep: int
) -> dict[str, list[float]]:
    """Serve q with `workers` workers on a simulated clock: an item runs for as long as the
    weight it uses (used_of), and a worker whose item ends credits what it left unused (when
    `credit`), acks it and takes the next. Stops before any partition has fewer than `keep`
    queued, so that all stay backlogged. Returns each partition's used service over its share,
    summed over the items dispatched so far, sampled at every dispatch."""
    queued = dict(q.top_partitions())
    served = dict.fromkeys(queued, 0.0)
    samples: dict[str, list[float]] = {p: [] for p in queued}
    running: list[tuple[float, int, Lease]] = []  # (end, dispatch number, lease)
    numbers = itertools.count()

    def dispatch(now: float) -> None:
        lease = take(q)
        partition, used = lease.payload, used_of[lease.task_id]
        queued[partition] -= 1
        served[partition] += used / q.share(partition)
        for p, total in served.items():
            samples[p].append(total)
        heapq.heappush(running, (now + used, next(numbers), lease))

    for _ in range(workers):
        dispatch(0.0)
    while min(queued.values()) > keep:
        now, _, lease = heapq.heappop(running)
        if credit:
            q.credit(lease.task_id, lease.token, used_of[lease.task_id])
        assert q.ack(lease.task_id, lease.token)
        dispatch(now)
    return samples


@pytest.mark.parametrize("credit", [True, False])
def test_items_that_finish_early_are_credited_and_the_lag_stays_bounded(
    r: redis.Redis, credit: bool
) -> None:
    """A's jobs use a quarter of their weight, B's all of it, C's (share 2) anything in
    between. Measured on the service they used, two backlogged partitions stay within one
    largest cost of each of the other over any interval, plus a largest cost for each other
    worker whose item has not ended (and so not been credited) when the next one is dispatched.
    Without credit, A is charged four times what it uses and falls behind without bound."""
    rng = random.Random(7)
    max_weight, workers = 8, 3
    shares = {"A": 1.0, "B": 1.0, "C": 2.0}
    uses = {"A": lambda w: max(1, w // 4), "B": lambda w: w, "C": lambda w: rng.randint(1, w)}
    q = FairQueue(r, "jobs", shares=shares)
    used_of: dict[str, int] = {}
    for p, use in uses.items():
        weights = [rng.randint(1, max_weight) for _ in range(150)]
        ids = q.enqueue(p, [Item(p, weight=w) for w in weights])
        used_of |= {i: use(w) for i, w in zip(ids, weights, strict=True)}

    samples = serve_with_workers(q, used_of, workers, credit=credit, keep=10)
    worst = {}
    for a, b in itertools.combinations(shares, 2):
        # The largest change of the gap between a and b over any interval of dispatches.
        gap = [x - y for x, y in zip(samples[a], samples[b], strict=True)]
        cost_a, cost_b = max_weight / shares[a], max_weight / shares[b]
        bound = cost_a + cost_b + (workers - 1) * max(cost_a, cost_b)
        worst[a + b] = (max(gap) - min(gap)) / bound
    if credit:
        assert max(worst.values()) <= 1, worst
    else:
        assert worst["AB"] > 1, worst
