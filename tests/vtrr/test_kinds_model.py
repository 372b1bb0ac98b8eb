"""Kinds against a model (docs/vtrr.md, "Kinds"): under random enqueues of items naming random
kinds and random leases by consumers of random kinds, every lease is the model's: no consumer
leases an item it may not take (eligibility), none finds nothing while an item it may take
waits (work conservation), and among the items it may take it leases the one with the lowest
start time, ties in arrival order (fair order among the items that compete for it). The model
places items as docs/vtrr.md says: an item starts at max(its partition's virtual time, the
lowest clock of its kinds), a kind's clock being the start of the last item its consumers leased
(the queue's clock until it has leased one), an item that names no kinds moving only the
queue's clock."""

from __future__ import annotations

from dataclasses import dataclass, field

import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from app.vtrr import FairQueue, Item

KINDS = ("a", "b", "c")
PARTITIONS = ("P", "Q", "R")
kinds_strategy = st.none() | st.sets(st.sampled_from(KINDS), min_size=1).map(
    lambda s: tuple(sorted(s))
)


@dataclass
class Waiting:
    id: str
    start: float
    seq: int
    kinds: tuple[str, ...] | None


@dataclass
class Model:
    clock: float = 0.0
    kind_clocks: dict[str, float] = field(default_factory=dict)
    partition_vt: dict[str, float] = field(default_factory=dict)
    queued: list[Waiting] = field(default_factory=list)
    seq: int = 0

    def enqueue(
        self, task_id: str, partition: str, weight: int, kinds: tuple[str, ...] | None
    ) -> None:
        base = self.clock
        if kinds is not None:
            base = min(self.kind_clocks.get(k, self.clock) for k in kinds)
        start = max(base, self.partition_vt.get(partition, 0.0))
        self.partition_vt[partition] = start + weight
        self.seq += 1
        self.queued.append(Waiting(task_id, start, self.seq, kinds))

    def lease(self, kind: str | None) -> str | None:
        mine = [w for w in self.queued if w.kinds is None or (kind is not None and kind in w.kinds)]
        if not mine:
            return None
        first = min(mine, key=lambda w: (w.start, w.seq))
        self.queued.remove(first)
        self.clock = max(self.clock, first.start)
        if first.kinds is not None and kind is not None:
            self.kind_clocks[kind] = max(self.kind_clocks.get(kind, first.start), first.start)
        if not self.queued:  # drained: every clock starts again
            self.clock, self.kind_clocks, self.partition_vt = 0.0, {}, {}
        return first.id


class KindsMachine(RuleBasedStateMachine):
    def __init__(self, client: redis.Redis) -> None:
        super().__init__()
        client.flushdb()
        self.client = client
        self.consumers = {kind: FairQueue(client, "jobs", kind=kind) for kind in (None, *KINDS)}
        self.model = Model()
        self.count = 0
        self.in_flight: list[tuple[str, str]] = []

    @rule(
        partition=st.sampled_from(PARTITIONS),
        weight=st.integers(min_value=1, max_value=4),
        kinds=kinds_strategy,
    )
    def enqueue(self, partition: str, weight: int, kinds: tuple[str, ...] | None) -> None:
        self.count += 1
        task_id = f"t{self.count}"
        self.consumers[None].enqueue(
            partition, [Item(task_id, id=task_id, weight=weight, kinds=kinds)]
        )
        self.model.enqueue(task_id, partition, weight, kinds)

    @rule(kind=st.sampled_from((None, *KINDS)))
    def lease(self, kind: str | None) -> None:
        lease = self.consumers[kind].dequeue()
        expected = self.model.lease(kind)
        assert (lease.task_id if lease else None) == expected
        if lease is not None:
            self.in_flight.append((lease.task_id, lease.token))

    @rule()
    def ack(self) -> None:
        if self.in_flight:
            task_id, token = self.in_flight.pop(0)
            assert self.consumers[None].ack(task_id, token)


def test_kinds_match_their_model(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, single_connection_client=True)
    try:
        run_state_machine_as_test(
            lambda: KindsMachine(client),  # type: ignore[arg-type]
            settings=settings(
                max_examples=60,
                stateful_step_count=50,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    finally:
        client.close()
