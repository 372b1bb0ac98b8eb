"""Hooks: an application's Lua runs inside the queue's step (app/vtrr/hooks.py), on either
engine (functions on Redis 7, scripts on 6.2): `lease` on each item leased, its reply in the
item's run; `done` with what the run handed end_with, before the ack; all in one call per item."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import redis
from celery import Celery, Task

from app.vtrr import Item, VTRRQueue, end_with, held_lease
from app.vtrr.step import Ending, step
from tests.vtrr.test_engines import ENGINES, clients  # noqa: F401 (the fixture)
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
return {lease = lease, done = done}
"""


PAYLOAD = '{"task": "t", "args": [], "kwargs": {}}'


class Recording:
    """Hooks that note what they saw in two hashes of their own."""

    lua = LUA

    def lease_args(self) -> Sequence[str | int]:
        return ["worker-1"]


@pytest.fixture(params=[name for name, binary in ENGINES.items() if binary])
def r(request: pytest.FixtureRequest, clients: dict[str, redis.Redis]) -> redis.Redis:  # noqa: F811
    client = clients[request.param]
    client.flushall()
    return client


def queue(r: redis.Redis, name: str = "hooked") -> VTRRQueue:
    port = r.connection_pool.connection_kwargs["port"]
    app = Celery("hooks-tests", broker=f"redis://127.0.0.1:{port}/9", set_as_current=False)
    return VTRRQueue(r, app, name=name, celery_queue=name, hooks=Recording())


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


def test_queues_with_other_hooks_cannot_step_together(r: redis.Redis) -> None:
    app = Celery("hooks-tests", set_as_current=False)
    plain = VTRRQueue(r, app, name="plain", celery_queue="plain")
    with pytest.raises(ValueError, match="share their hooks"):
        step([queue(r), plain])
