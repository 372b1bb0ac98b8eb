"""Hooks: an application's Lua runs inside the queue's own calls (app/vtrr/hooks.py), on either
engine (functions on Redis 7, scripts on 6.2): in the step, `lease` on each item leased, its
reply in the item's run, and `done` with what the run handed end_with, before the ack, all in
one call per item; in an enqueue given hook arguments, `admit` before the queue's checks and
`enqueued` after them, before its writes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
import redis
import redis.asyncio as aioredis
from celery import Celery, Task
from redis.exceptions import ResponseError

from app.vtrr import (
    Admitted,
    DuplicateTaskError,
    Item,
    QueueFullError,
    VTRRQueue,
    end_with,
    held_lease,
)
from app.vtrr.aio import AsyncFairQueue
from app.vtrr.step import Ending, step
from tests.vtrr.conftest import ENGINES
from tests.worker.test_calls_per_job import scripting_calls

LUA = """
local function lease(id, token, args)
  redis.call('HSET', 'hooked:started', id, args[1])
  return {'started', id}
end
local function done(id, token, args, step)
  redis.call('HSET', 'hooked:done', id, table.concat(args, ','))
  return {step.held and 1 or 0, step.credited > 0 and 1 or 0}
end
local function admit(partition, args)
  redis.call('RPUSH', 'hooked:admitted', partition .. ' ' .. table.concat(args, ','))
  if args[1] == 'stop' then return {'stopped', partition} end
  if args[1] == 'fail' then return redis.error_reply('REFUSED ' .. partition) end
  return nil
end
local function enqueued(partition, args)
  redis.call('HSET', 'hooked:records', partition, table.concat(args, ','))
  return {'recorded', #args}
end
local function reclaimed(id, token)
  redis.call('RPUSH', 'hooked:reclaimed', id .. ' ' .. token)
end
return {lease = lease, done = done, admit = admit, enqueued = enqueued, reclaimed = reclaimed}
"""


PAYLOAD = '{"task": "t", "args": [], "kwargs": {}}'


class Recording:
    """Hooks that note what they saw in two hashes of their own."""

    lua = LUA

    def lease_args(self) -> Sequence[str | int]:
        return ["worker-1"]


@pytest.fixture(params=[name for name, binary in ENGINES.items() if binary])
def r(request: pytest.FixtureRequest, clients: dict[str, redis.Redis]) -> redis.Redis:
    client = clients[request.param]
    client.flushall()
    return client


def port_of(r: redis.Redis) -> int:
    return int(r.connection_pool.connection_kwargs["port"])


def queue(r: redis.Redis, name: str = "hooked") -> VTRRQueue:
    broker = f"redis://127.0.0.1:{port_of(r)}/9"
    app = Celery("hooks-tests", broker=broker, set_as_current=False)
    return VTRRQueue(r, app, name=name, celery_queue=name, hooks=Recording())


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def aq(r: redis.Redis) -> AsyncIterator[AsyncFairQueue]:
    """The hooked queue on an asyncio client, as a web handler has it (VTRRQueue.aio)."""
    client = aioredis.Redis(host="127.0.0.1", port=port_of(r), decode_responses=True)
    yield queue(r).aio(client)
    await client.aclose()


def queue_state(r: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key of the queue with its serialized value: equal states mean nothing was written."""
    raw = redis.Redis(host="127.0.0.1", port=port_of(r))
    try:
        return {key: raw.dump(key) for key in raw.keys("vtrr:*")}  # type: ignore[union-attr]
    finally:
        raw.close()


def test_each_item_of_a_drain_is_started_and_ended_by_the_hooks_in_one_call_each(
    r: redis.Redis,
) -> None:
    q = queue(r)
    seen: list[object] = []

    @q.task
    def work(self: Task, x: str) -> None:  # type: ignore[type-arg]
        lease = held_lease(self)
        assert lease is not None
        seen.append(lease.hooked)
        end_with(self, f"ran-{x}", "ok", used_weight=1)

    ids = work.queue("p", [{"id": f"i{n}", "args": [str(n)], "weight": 3} for n in range(3)])
    work.celery_task.apply()  # warm: loads the library or scripts
    ids += work.queue("p", [{"id": f"j{n}", "args": [str(n)], "weight": 3} for n in range(3)])
    before = scripting_calls(r)
    work.celery_task.apply()
    assert scripting_calls(r) - before == 3 + 1  # the first lease, then one step per item
    assert seen == [["started", task_id] for task_id in ids]
    assert r.hgetall("hooked:started") == dict.fromkeys(ids, "worker-1")
    assert r.hgetall("hooked:done") == {i: f"ran-{i[1]},ok" for i in ids}
    assert q.pending() == 0 and q.length() == 0
    assert q.stats()["acked"] == 6 and q.stats()["credited"] == 6


def test_done_hears_whether_the_lease_was_still_held_and_what_was_credited(
    r: redis.Redis,
) -> None:
    q = queue(r)
    q.enqueue("p", [Item(PAYLOAD, id=task_id, weight=4) for task_id in "abc"])
    first = step([q])
    assert first.lease is not None and first.hooked == ["started", "a"]
    held = step([q], ending=Ending(q, "a", first.lease.token, ["x"], used_weight=1))
    assert held.acked is True and held.credited > 0
    assert held.done == [1, 1]
    assert held.lease is not None and held.lease.task_id == "b"
    assert q.release("b", held.lease.token)  # the lease is gone before the run ends
    lost = step([q], ending=Ending(q, "b", held.lease.token, ["y"], used_weight=1), lease_from=0)
    assert (lost.acked, lost.credited, lost.done) == (False, 0.0, [0, 0])
    assert lost.lease is None and q.length() == 2  # b is queued again, c waits


def lapse(q: VTRRQueue, task_id: str, token: str) -> None:
    """Let a lease run out now, without waiting."""
    assert q.extend(task_id, token, 1e-6)


def test_reclaimed_hears_of_each_lapsed_lease_in_whichever_call_reclaims_it(
    r: redis.Redis,
) -> None:
    """The periodic reclaim, a dequeue, an ack_and_lease and a step each put a lapsed item back
    in line and tell the hook, in the same call, with the token that lapsed (not the next
    one's)."""
    q = queue(r)
    q.enqueue("p", [Item(PAYLOAD, id=task_id) for task_id in "abcd"])
    leases = {lease.task_id: lease for lease in [q.dequeue() for _ in range(4)] if lease}
    lapse(q, "a", leases["a"].token)
    assert q.reclaim() == 1
    lapse(q, "b", leases["b"].token)
    assert q.dequeue() is not None  # it reclaims b first, then leases a (or b)
    lapse(q, "c", leases["c"].token)
    stepped = step([q])  # a step reclaims too
    assert stepped.lease is not None
    lapse(q, "d", leases["d"].token)
    acked, following = q.ack_and_lease("none", "none")  # acks nothing, reclaims, leases
    assert not acked and following is not None
    told = r.lrange("hooked:reclaimed", 0, -1)
    assert told == [f"{task_id} {leases[task_id].token}" for task_id in "abcd"]
    assert q.stats()["reclaimed"] == 4


def test_without_a_reclaimed_hook_a_reclaim_tells_nobody(r: redis.Redis) -> None:
    app = Celery("hooks-tests", set_as_current=False)
    plain = VTRRQueue(r, app, name="plain", celery_queue="plain")
    plain.enqueue("p", [Item(PAYLOAD, id="a")])
    lease = plain.dequeue()
    assert lease is not None
    lapse(plain, "a", lease.token)
    assert plain.reclaim() == 1
    assert not r.exists("hooked:reclaimed")


def test_queues_with_other_hooks_cannot_step_together(r: redis.Redis) -> None:
    app = Celery("hooks-tests", set_as_current=False)
    plain = VTRRQueue(r, app, name="plain", celery_queue="plain")
    with pytest.raises(ValueError, match="share their hooks"):
        step([queue(r), plain])


@pytest.mark.anyio
async def test_enqueued_runs_after_admit_and_its_reply_comes_back_with_the_items_queued(
    r: redis.Redis, aq: AsyncFairQueue
) -> None:
    items = [Item(PAYLOAD, id="a", weight=2), Item(PAYLOAD, id="b")]
    admitted = await aq.admit_and_enqueue("p", items, ["go", 7])
    assert (admitted.ids, admitted.reply, admitted.queued) == (["a", "b"], ["recorded", 2], True)
    assert admitted.triggers == 2  # one per item, below the cap of 4
    assert r.lrange("hooked:admitted", 0, -1) == ["p go,7"]
    assert r.hgetall("hooked:records") == {"p": "go,7"}
    assert await aq.positions(["a", "b"]) == [0, 1]


@pytest.mark.anyio
async def test_admit_that_answers_stops_the_call_before_the_queue_writes_anything(
    r: redis.Redis, aq: AsyncFairQueue
) -> None:
    await aq.enqueue("p", [Item(PAYLOAD, id="before")])
    before = queue_state(r)
    admitted = await aq.admit_and_enqueue("p", [Item(PAYLOAD, id="a")], ["stop"])
    assert admitted == Admitted([], 0, ["stopped", "p"], False)
    assert queue_state(r) == before
    assert not r.exists("hooked:records")  # enqueued did not run


@pytest.mark.anyio
async def test_an_error_reply_of_admit_fails_the_call_and_nothing_of_the_queue_is_written(
    r: redis.Redis, aq: AsyncFairQueue
) -> None:
    await aq.enqueue("p", [Item(PAYLOAD, id="before")])
    before = queue_state(r)
    with pytest.raises(ResponseError, match="REFUSED p"):
        await aq.admit_and_enqueue("p", [Item(PAYLOAD, id="a")], ["fail"])
    assert queue_state(r) == before
    assert r.lrange("hooked:admitted", 0, -1) == ["p fail"]  # what the hook wrote stays
    assert not r.exists("hooked:records")


@pytest.mark.anyio
async def test_the_queue_refuses_after_admit_and_enqueued_never_runs(
    r: redis.Redis, aq: AsyncFairQueue
) -> None:
    await aq.enqueue("p", [Item(PAYLOAD, id="a")])
    before = queue_state(r)
    with pytest.raises(QueueFullError):
        await aq.admit_and_enqueue("p", [Item(PAYLOAD, id="b")], ["go"], max_queued=1)
    with pytest.raises(DuplicateTaskError):
        await aq.admit_and_enqueue("p", [Item(PAYLOAD, id="a")], ["go"])
    assert queue_state(r) == before
    assert r.lrange("hooked:admitted", 0, -1) == ["p go", "p go"]  # admit ran first, each time
    assert not r.exists("hooked:records")


@pytest.mark.anyio
async def test_an_enqueue_without_hook_arguments_calls_no_hook(
    r: redis.Redis, aq: AsyncFairQueue
) -> None:
    queue(r).enqueue("p", [Item(PAYLOAD, id="a")])
    await aq.enqueue("p", [Item(PAYLOAD, id="b")])
    with pytest.raises(ValueError, match="hook arguments"):
        await aq.admit_and_enqueue("p", [Item(PAYLOAD, id="c")], [])
    assert r.keys("hooked:*") == []
    assert await aq.positions(["a", "b", "c"]) == [0, 1, None]
