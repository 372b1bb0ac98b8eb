"""The flat variant of scripts/bench_dequeue_floor.py does what the library's dequeue+ack does
(the same leases in the same order, the same keys holding the same values after), so that what
the benchmark's library / flat ratio measures is not a difference in the work done in Redis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.exceptions import ResponseError

from app.dev.redis_server import RedisServer
from app.vtrr import FairQueue, Item
from app.vtrr.wire import micros
from scripts.benchkit.dequeue_floor import flat_pair, load
from tests.vtrr.conftest import redis7_binary

PARTITIONS = 3
ITEMS = 12  # four of each partition, plus one more each that stays queued


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis 7 of this module's own (the suite's may be 6.2, without functions)."""
    binary = redis7_binary()
    if binary is None:
        pytest.skip("no Redis 7 on PATH: the flat variant is a function")
    started = RedisServer(tmp_path_factory.mktemp("redis7"), binary=binary).start()
    yield started
    started.stop()


@pytest.fixture
def r(server: RedisServer) -> Iterator[redis.Redis]:
    """A client on that server, emptied, with the benchmark's functions loaded."""
    client = redis.Redis.from_url(server.url)
    client.flushall()
    load(client)
    yield client
    client.close()


def dump(r: redis.Redis, queue: FairQueue) -> dict[str, Any]:
    """Every key of one queue, by its name without the queue's, with what it holds."""
    found: dict[str, Any] = {}
    tag = f"{{{queue.name}}}"
    for raw in r.scan_iter(match=f"vtrr:{tag}:*"):
        key = raw.decode()
        kind = r.type(key).decode()
        if kind == "zset":
            value: Any = r.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            value = r.hgetall(key)
        else:
            value = r.get(key)
        found[key.replace(tag, "{}")] = value
    return found


def test_flat_pairs_lease_the_same_items_and_leave_the_same_keys_as_the_library(
    r: redis.Redis,
) -> None:
    library, flat = FairQueue(r, "library"), FairQueue(r, "flat")
    # The same ids on both sides: item keys and index entries must then match byte for byte.
    for queue in (library, flat):
        for p in range(PARTITIONS):
            items = [Item("x", id=f"p{p}-{i}") for i in range(ITEMS // PARTITIONS + 1)]
            queue.enqueue(f"p{p}", items)
    assert dump(r, library) == dump(r, flat)

    by_library, by_flat = [], []
    for _ in range(ITEMS):
        lease = library.dequeue()
        assert lease is not None
        assert library.ack(lease.task_id, lease.token)
        by_library.append((lease.task_id, lease.payload, lease.timeouts))
        reply = flat_pair(r, flat.keys, micros(flat.lease_seconds))
        assert reply is not None
        by_flat.append((reply[0].decode(), reply[1].decode(), int(reply[2])))

    assert by_flat == by_library
    assert [task_id.split("-")[0] for task_id, _, _ in by_library[:PARTITIONS]] == [
        "p0",
        "p1",
        "p2",
    ]  # round robin, so the queue was fair and the comparison saw more than one partition
    assert dump(r, library) == dump(r, flat)


def test_the_flat_variant_stops_where_the_library_would_take_a_path_it_does_not_model(
    r: redis.Redis,
) -> None:
    queue = FairQueue(r, "one")
    queue.enqueue("p", [Item("x")])
    with pytest.raises(ResponseError, match="went idle"):
        flat_pair(r, queue.keys, micros(queue.lease_seconds))

    expired = FairQueue(r, "expired", lease_seconds=0.000001)
    expired.enqueue("p", [Item("x"), Item("y"), Item("z")])
    assert expired.dequeue() is not None  # its lease is over by the next call
    with pytest.raises(ResponseError, match="lease expired"):
        flat_pair(r, expired.keys, micros(expired.lease_seconds))
