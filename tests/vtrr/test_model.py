"""FairQueue against its pure-Python model (tests/vtrr/model.py), under random operations.

Every answer is compared: the leases handed out (and so the dispatch order), booleans, positions,
lengths, stats. After every step the Redis state is compared with the model's too: the queue's
members and scores, the virtual clock, the per-partition bookkeeping, and that nothing is left
behind for an item once it is gone. Leases expire without sleeping: extending one by a
microsecond makes it expired by the next call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from app.vtrr import DuplicateTaskError, FairQueue, Item, Lease, Limits, OverLimitError
from app.vtrr.layout import Placement
from app.vtrr.step import Ending, step
from tests.support import examples
from tests.vtrr.model import QueueModel, Taken

LEASE_SECONDS = 3600  # nothing expires unless a rule expires it
EXPIRE_NOW = 1e-6  # a lease extended by this much has expired by the next call
PARTITIONS = ("ann", "bob", "cy", "dee")
ID_POOL = ("t1", "t2", "t3", "t4")  # ids that callers choose, so that some collide
SHARES = (1, 2, 0.5, 3, 0.1)
# A longer bug hunt: FAIRGPU_MODEL_EXAMPLES=2000 uv run pytest tests/vtrr/test_model.py
EXAMPLES = int(os.environ.get("FAIRGPU_MODEL_EXAMPLES", examples(100)))


@dataclass(frozen=True)
class Config:
    """One example's queue: how many partitions, their shares, and where reclaims go."""

    partitions: int
    shares: dict[str, float] | None
    reclaim_to: Placement
    reclaim_on_dequeue: bool


configs = st.builds(
    Config,
    partitions=st.integers(2, 4),
    shares=st.none()
    | st.lists(st.sampled_from(SHARES), min_size=4, max_size=4).map(
        lambda shares: dict(zip(PARTITIONS, shares, strict=True))
    ),
    reclaim_to=st.sampled_from(("fair", "front", "partition_front")),
    reclaim_on_dequeue=st.booleans(),
)
items = st.builds(
    Item,
    payload=st.text(st.characters(codec="utf-8"), max_size=3),
    id=st.sampled_from((*ID_POOL, *[None] * 12)),  # mostly fresh ids, some duplicates
    weight=st.integers(1, 5),
)
newest = st.integers(0, 3)  # which lease a rule takes: 0 the newest, 3 (or the oldest) the 4th


def text(value: bytes | str) -> str:
    """A Redis reply as text (the client returns bytes)."""
    return value.decode() if isinstance(value, bytes) else value


def as_taken(lease: Lease | None) -> Taken | None:
    """What of a lease the model predicts: its item and timeouts, not its token or expiry."""
    return None if lease is None else Taken(lease.task_id, lease.payload, lease.timeouts)


class FairQueueMachine(RuleBasedStateMachine):
    """Drives one FairQueue and one QueueModel with the same operations."""

    task_ids = Bundle("task_ids")
    # Whom cancel, promote and position name: an int is a rank in the queue (clamped to the
    # last), a str an id that may be queued, in flight, finished or never seen.
    someone = st.integers(0, 5) | task_ids | st.sampled_from(ID_POOL)

    def __init__(self, client: redis.Redis) -> None:
        super().__init__()
        client.flushdb()
        self.redis = client
        self.partitions: tuple[str, ...] = PARTITIONS
        self.live: list[Lease] = []  # leases not yet seen to be finished or stale, newest last
        self.done: list[Lease] = []  # leases that are finished or stale, newest last

    @initialize(
        target=task_ids,
        config=configs,
        seeds=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), max_size=6),
    )
    def build_queue(self, config: Config, seeds: list[tuple[int, int]]) -> object:
        """Make the queue and its model, and queue a few items so that later rules have work."""
        self.partitions = PARTITIONS[: config.partitions]
        self.shares = dict(config.shares or {})  # the queue's; reshare changes it
        self.queue = FairQueue(
            self.redis,
            "model",
            lease_seconds=LEASE_SECONDS,
            shares=self.shares,
            reclaim_to=config.reclaim_to,
            reclaim_on_dequeue=config.reclaim_on_dequeue,
        )
        self.model = QueueModel(
            shares=config.shares,
            reclaim_to=config.reclaim_to,
            reclaim_on_dequeue=config.reclaim_on_dequeue,
        )
        ids: list[str] = []
        for n, (partition, weight) in enumerate(seeds):
            key = self.partitions[partition % len(self.partitions)]
            chosen = ID_POOL[n] if n < len(ID_POOL) else None  # so that the pool's ids are taken
            ids += self.queue.enqueue(key, [Item(f"seed{n}", id=chosen, weight=weight)])
            self.model.enqueue(key, [(ids[-1], weight, f"seed{n}")], front=False)
        return multiple(*ids)

    def lease(self, ago: int) -> Lease:
        """One of the newest live leases (it may have gone stale through a reclaim)."""
        return self.live[-1 - min(ago, len(self.live) - 1)]

    def retire_if_done(self, lease: Lease) -> None:
        """Move a lease that is no longer current from the live list to the done list."""
        if not self.model.holds_lease(lease.task_id, lease.token):
            self.live.remove(lease)
            self.done.append(lease)

    def assert_fresh_expiry(self, lease: Lease) -> None:
        """A lease just handed out or renewed in full expires lease_seconds from Redis's now."""
        seconds, micros = self.redis.time()
        assert abs(lease.expires_at - (seconds + micros / 1e6 + LEASE_SECONDS)) < 60

    def task_id(self, who: int | str) -> str:
        """The id that someone stands for: a rank in the model's queue, or an id as it is."""
        if isinstance(who, str):
            return who
        order = self.model.order()
        return order[min(who, len(order) - 1)] if order else ID_POOL[0]

    # -- the job's life ---------------------------------------------------------------------------
    @rule(
        target=task_ids,
        partition=st.integers(0, 3),
        batch=st.lists(items, min_size=1, max_size=4),
        front=st.booleans(),
    )
    def enqueue(self, partition: int, batch: list[Item], front: bool) -> object:
        key = self.partitions[partition % len(self.partitions)]
        held = self.model.over_limit(key, [item.weight for item in batch])
        if held is not None:
            with pytest.raises(OverLimitError) as over:
                self.queue.enqueue(key, batch, front=front)
            assert over.value.limit == held
            return multiple()
        duplicate = self.model.first_duplicate([item.id for item in batch])
        if duplicate is not None:
            with pytest.raises(DuplicateTaskError) as refused:
                self.queue.enqueue(key, batch, front=front)
            assert refused.value.task_id == duplicate
            return multiple()
        ids = self.queue.enqueue(key, batch, front=front)
        assert all(item.id in (None, task_id) for item, task_id in zip(batch, ids, strict=True))
        entries = [(i, item.weight, item.payload) for i, item in zip(ids, batch, strict=True)]
        self.model.enqueue(key, entries, front)
        return multiple(*ids)

    @rule(from_rear=st.booleans())
    def dequeue(self, from_rear: bool) -> None:
        lease = self.queue.dequeue(from_rear=from_rear)
        token = "" if lease is None else lease.token
        assert as_taken(lease) == self.model.dequeue(token, from_rear=from_rear)
        if lease is not None:
            self.assert_fresh_expiry(lease)
            self.live.append(lease)

    @precondition(lambda self: self.live)
    @rule(ago=newest)
    def ack(self, ago: int) -> None:
        lease = self.lease(ago)
        expected = self.model.ack(lease.task_id, lease.token)
        assert self.queue.ack(lease.task_id, lease.token) == expected
        self.retire_if_done(lease)

    @precondition(lambda self: self.live)
    @rule(ago=newest)
    def ack_and_lease(self, ago: int) -> None:
        """The fused step of a drain: the ack, then the next lease, in one call."""
        lease = self.lease(ago)
        acked, following = self.queue.ack_and_lease(lease.task_id, lease.token)
        assert acked == self.model.ack(lease.task_id, lease.token)
        self.retire_if_done(lease)
        token = "" if following is None else following.token
        assert as_taken(following) == self.model.dequeue(token, from_rear=False)
        if following is not None:
            self.assert_fresh_expiry(following)
            self.live.append(following)

    @precondition(lambda self: self.live)
    @rule(ago=newest, used=st.sampled_from((0, 1, 2, 6)), lease=st.booleans())
    def step(self, ago: int, used: int, lease: bool) -> None:
        """The step of a worker between two items (step.lua): the credit of what the item did
        not use (0: none asked), the ack, then, when asked, the next lease, in one call."""
        ended = self.lease(ago)
        credited = self.model.credit(ended.task_id, ended.token, used) if used else 0.0
        acked = self.model.ack(ended.task_id, ended.token)
        ending = Ending(self.queue, ended.task_id, ended.token, used_weight=used)
        stepped = step([self.queue], ending=ending, lease_from=None if lease else 0)
        assert (stepped.acked, stepped.credited) == (acked, credited)
        self.retire_if_done(ended)
        if lease:
            token = "" if stepped.lease is None else stepped.lease.token
            assert as_taken(stepped.lease) == self.model.dequeue(token, from_rear=False)
        if stepped.lease is not None:
            self.assert_fresh_expiry(stepped.lease)
            self.live.append(stepped.lease)

    @precondition(lambda self: self.live)
    @rule(ago=newest, seconds=st.sampled_from((EXPIRE_NOW, LEASE_SECONDS)))
    def extend(self, ago: int, seconds: float) -> None:
        lease = self.lease(ago)
        expected = self.model.extend(lease.task_id, lease.token, expire=seconds == EXPIRE_NOW)
        assert self.queue.extend(lease.task_id, lease.token, seconds) == expected
        self.retire_if_done(lease)

    @precondition(lambda self: self.live)
    @rule(count=st.integers(1, 4))
    def worker_dies(self, count: int) -> None:
        """The newest count leases all expire, the newest first (so reclaim order is visible)."""
        for lease in reversed(self.live[-count:]):
            expected = self.model.extend(lease.task_id, lease.token, expire=True)
            assert self.queue.extend(lease.task_id, lease.token, EXPIRE_NOW) == expected
            self.retire_if_done(lease)

    @precondition(lambda self: self.live)
    @rule(ago=newest)
    def resume(self, ago: int) -> None:
        lease = self.lease(ago)
        expected = self.model.resume(lease.task_id, lease.token)
        resumed = self.queue.resume(lease.task_id, lease.token)
        assert as_taken(resumed) == expected
        if resumed is not None:
            assert resumed.token == lease.token
            self.assert_fresh_expiry(resumed)
        self.retire_if_done(lease)

    @precondition(lambda self: self.live)
    @rule(ago=newest, used=st.sampled_from((1, 1, 2, 3, 6)))
    def credit(self, ago: int, used: int) -> None:
        """A job ends having used `used` of its weight (6 is above any weight: no credit); the
        same lease may come up again, as a retry of a lost reply would."""
        lease = self.lease(ago)
        expected = self.model.credit(lease.task_id, lease.token, used)
        assert self.queue.credit(lease.task_id, lease.token, used) == expected

    @precondition(lambda self: self.live)
    @rule(ago=newest)
    def release(self, ago: int) -> None:
        lease = self.lease(ago)
        expected = self.model.release(lease.task_id, lease.token)
        assert self.queue.release(lease.task_id, lease.token) == expected
        self.retire_if_done(lease)

    @precondition(lambda self: self.live)
    @rule(ago=newest)
    def put_back(self, ago: int) -> None:
        """A preempted run: its item goes before its own partition's, not before everything."""
        lease = self.lease(ago)
        before = self.model.order()
        expected = self.model.put_back(lease.task_id, lease.token)
        assert self.queue.put_back(lease.task_id, lease.token) == expected
        self.retire_if_done(lease)
        if expected:
            assert [i for i in self.model.order() if i != lease.task_id] == before
            own = [
                i
                for i in self.model.order()
                if self.model.entries[i].partition == self.model.entries[lease.task_id].partition
            ]
            assert own[0] == lease.task_id

    @rule(who=someone)
    def take(self, who: int | str) -> None:
        """A named item leased out of turn: the others' order is what it was without it."""
        task_id = self.task_id(who)
        others = [i for i in self.model.order() if i != task_id]
        lease = self.queue.take(task_id)
        token = "" if lease is None else lease.token
        assert as_taken(lease) == self.model.take(task_id, token)
        if lease is not None:
            assert self.model.order() == others
            self.assert_fresh_expiry(lease)
            self.live.append(lease)

    @precondition(lambda self: self.done)
    @rule(ago=newest)
    def stale_lease_is_refused(self, ago: int) -> None:
        lease = self.done[-1 - min(ago, len(self.done) - 1)]
        assert not self.model.holds_lease(lease.task_id, lease.token)
        assert not self.queue.ack(lease.task_id, lease.token)
        assert not self.queue.extend(lease.task_id, lease.token, EXPIRE_NOW)
        assert not self.queue.release(lease.task_id, lease.token)
        assert not self.queue.put_back(lease.task_id, lease.token)
        assert self.queue.resume(lease.task_id, lease.token) is None
        assert self.queue.credit(lease.task_id, lease.token, 1) == 0.0

    @rule()
    def reclaim(self) -> None:
        assert self.queue.reclaim() == self.model.reclaim()

    # -- the redq operations ----------------------------------------------------------------------
    @rule(who=someone)
    def cancel(self, who: int | str) -> None:
        task_id = self.task_id(who)
        assert self.queue.cancel(task_id) == self.model.cancel(task_id)

    @rule(who=someone)
    def promote(self, who: int | str) -> None:
        task_id = self.task_id(who)
        assert self.queue.promote(task_id) == self.model.promote(task_id)

    @rule(partition=st.integers(0, 3), share=st.sampled_from(SHARES))
    def reshare(self, partition: int, share: float) -> None:
        """An account's share changes: its queued items are charged again at once, and its
        later ones at the new share (the shares the queue was given say so from now on)."""
        key = self.partitions[partition % len(self.partitions)]
        self.shares[key] = share
        assert self.queue.reshare(key, share) == self.model.reshare(key, share)

    @rule(
        partition=st.integers(0, 3),
        most_n=st.sampled_from((None, 1, 2)),
        most_held=st.sampled_from((None, 3, 6)),
    )
    def set_limits(self, partition: int, most_n: int | None, most_held: int | None) -> None:
        """A partition's limits change (weights never run down here: weight_per_second 0)."""
        key = self.partitions[partition % len(self.partitions)]
        self.queue.set_limits(key, Limits(most_n, most_held, weight_per_second=0))
        self.model.set_limits(key, most_n, most_held)

    @rule(who=someone)
    def position(self, who: int | str) -> None:
        task_id = self.task_id(who)
        assert self.queue.position(task_id) == self.model.position(task_id)

    # -- after every step -------------------------------------------------------------------------
    @invariant()
    def counts_match(self) -> None:
        assert self.queue.length() == self.model.length()
        assert self.queue.pending() == self.model.pending()
        assert self.queue.stats() == self.model.stats

    @invariant()
    def redis_state_matches(self) -> None:
        """Everything the queue keeps in Redis, read in one round trip; nothing else writes to
        this Redis, so the reads need no transaction."""
        k, model = self.queue.keys, self.model
        clock = (k.current_virtual_time, k.partition_virtual_time, k.partition_queued)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrange(k.queue, 0, -1, withscores=True)
        pipe.get(k.current_virtual_time)
        pipe.hgetall(k.partition_virtual_time)
        pipe.hgetall(k.partition_queued)
        pipe.zrange(k.idle_partitions, 0, -1, withscores=True)
        pipe.zrange(k.inflight, 0, -1)
        pipe.zrange(k.partition_items, 0, -1, withscores=True)
        pipe.exists(*clock, k.idle_partitions)
        pipe.keys("*")
        replies = pipe.execute()
        queue, cvt, pvt, queued, idle, inflight, index, clocks, stored = replies
        items = self.items([text(key) for key in stored if text(key).startswith(k.item)])
        # What may start is in the queue; every limited partition's other items are parked.
        ready = [(text(member), score) for member, score in queue]
        assert ready == model.may_start()
        parked = self.parked([text(key) for key in stored if text(key).startswith(k.park)])
        assert sorted(ready + parked, key=lambda ms: (ms[1], ms[0])) == model.queue()
        assert float(cvt or 0) == model.cvt
        assert {text(p): float(vt) for p, vt in pvt.items()} == model.pvt
        per_partition = {p: model.queued_in(p) for p in self.partitions}
        assert {text(p): int(n) for p, n in queued.items()} == {
            p: n for p, n in per_partition.items() if n
        }
        assert {text(p): vt for p, vt in idle} == model.idle_partitions()
        assert set(items) == set(model.entries)
        assert {i for i, item in items.items() if b"l" not in item} == set(model.order())
        leased = {i for i, entry in model.entries.items() if entry.token is not None}
        assert {i for i, item in items.items() if b"l" in item} == leased
        assert set(map(text, inflight)) == leased
        assert {i: int(item[b"t"]) for i, item in items.items() if b"t" in item} == {
            i: entry.timeouts for i, entry in model.entries.items() if entry.timeouts
        }
        # One index entry per queued item, under its partition, all scored 0.
        assert {text(entry): score for entry, score in index} == {
            f"{len(e.partition.encode())}:{e.partition}:{e.member}": 0.0
            for e in model.entries.values()
            if e.member
        }
        # Nothing is left behind: no clock once the queue is drained, nothing once it is empty.
        if model.length() == 0:
            assert clocks == 0
        if not model.entries:
            assert {text(key) for key in stored} <= {k.seq, k.stats, k.limits, k.freed}

    def parked(self, keys: list[str]) -> list[tuple[str, float]]:
        """The (member, score) pairs of every limited partition's parked items."""
        pipe = self.redis.pipeline(transaction=False)
        for key in keys:
            pipe.zrange(key, 0, -1, withscores=True)
        return [(text(m), score) for pairs in pipe.execute() for m, score in pairs]

    def items(self, keys: list[str]) -> dict[str, dict[bytes, bytes]]:
        """Each item's hash, by task id."""
        pipe = self.redis.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        prefix = len(self.queue.keys.item)
        return {key[prefix:]: item for key, item in zip(keys, pipe.execute(), strict=True)}


def test_fair_queue_matches_its_model(redis_url: str) -> None:
    # One connection rather than a pool: taking one from redis-py's pool and giving it back
    # for every command is about a sixth of this test's time, and nothing here runs in parallel.
    client = redis.Redis.from_url(redis_url, single_connection_client=True)
    try:
        # Any zero-argument factory will do (Hypothesis's annotation says a class).
        run_state_machine_as_test(
            lambda: FairQueueMachine(client),  # type: ignore[arg-type]
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=60,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    finally:
        client.close()


def test_a_credit_that_moves_an_accounts_queued_items_ahead_of_anothers(redis_url: str) -> None:
    """One run of the machine's own rules, written out, so that the case the random runs may
    miss is always there: ann's running item used 1 of its 4, and her next item moves from
    behind three of bob's to right behind his first, in the queue and in the model alike."""
    client = redis.Redis.from_url(redis_url, single_connection_client=True)
    try:
        machine = FairQueueMachine(client)
        machine.build_queue(Config(2, None, "fair", True), seeds=[])
        machine.enqueue(0, [Item(f"a{i}", id=f"a{i}", weight=4) for i in range(3)], front=False)
        machine.enqueue(1, [Item(f"b{i}", id=f"b{i}") for i in range(6)], front=False)
        machine.dequeue(from_rear=False)
        assert machine.model.order() == ["b0", "b1", "b2", "b3", "a1", "b4", "b5", "a2"]
        machine.credit(ago=0, used=1)
        assert machine.model.order() == ["b0", "a1", "b1", "b2", "b3", "b4", "a2", "b5"]
        machine.counts_match()
        machine.redis_state_matches()
        machine.credit(ago=0, used=1)  # once per lease
        machine.redis_state_matches()
    finally:
        client.close()


def test_a_reshare_mid_backlog_agrees_with_the_model(redis_url: str) -> None:
    """The machine's rules again, written out: bob's share goes from 1 to 3 while one of his
    items runs and another sits at the front; his queued ones are then a third as far apart,
    and the one that runs is credited from what it was charged before."""
    client = redis.Redis.from_url(redis_url, single_connection_client=True)
    try:
        machine = FairQueueMachine(client)
        machine.build_queue(Config(2, None, "fair", True), seeds=[])
        machine.enqueue(0, [Item(f"a{i}", id=f"a{i}", weight=3) for i in range(3)], front=False)
        machine.enqueue(1, [Item(f"b{i}", id=f"b{i}", weight=3) for i in range(5)], front=False)
        machine.dequeue(from_rear=False)  # a0
        machine.dequeue(from_rear=False)  # b0
        machine.promote("b4")
        machine.reshare(partition=1, share=3)  # b1 keeps 3 (a tie: a1 came first); b2, b3 4, 5
        assert machine.model.order() == ["b4", "a1", "b1", "b2", "b3", "a2"]
        machine.enqueue(1, [Item("b5", id="b5", weight=3)], front=False)
        machine.credit(ago=0, used=1)  # b0, charged 3 before: 3 x 2/3 = 2 back
        # b1, b2 move to 1, 2, ahead of b4, which stays at the front's score then (3)
        assert machine.model.order() == ["b1", "b2", "b4", "a1", "b3", "b5", "a2"]
        machine.counts_match()
        machine.redis_state_matches()
    finally:
        client.close()
