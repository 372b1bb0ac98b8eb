"""A job of two cards on two workers of one host (issue 42, "The lending workers"): the workers'
ticks claim it, one leading, whose lease goes to its own Celery queue; the other lends its card,
retires its child, says its card is clean, and says in its heartbeat to which job it is lent;
the leader's run sees both devices, its result names them, and its end frees both cards. Real
Redis as the queues' store and the broker; the jobs run inline."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import redis
from pydantic import BaseModel

from app.auth import Accounts
from app.fleet.place import WorkerPlace
from app.jobs import JobContext, Registry, job
from app.settings import Settings
from app.store import JobRecorder
from app.store.keys import WORKERS, input_key, job_key
from app.store.workers import Seen
from app.vtrr.held import LEASE_KWARG
from app.wiring.service import Service
from app.worker.devices import Devices
from app.worker.gangs import Lends
from app.worker.inline import InlineExecutor
from app.worker.presence import Presence
from app.worker.runner import JobRunner, build_worker
from tests.worker.support import FIXTURES, OWNER
from tests.worker.test_devices import child

PLACE = WorkerPlace("node-a", None, None, 1.0)


class Nothing(BaseModel):
    """No input."""


class Cards(BaseModel):
    """The devices a run saw."""

    devices: list[tuple[str, int | None]]


#: What a test looks at while a run of `cards` runs (the job's id in, what it saw out).
LOOKS: list[Callable[[str], object]] = []
LOOKED: list[object] = []


@job(name="cards", queue="short", max_duration_s=60)
def cards(ctx: JobContext, inp: Nothing) -> Cards:
    """Say which devices this run has (and let the test look at the job meanwhile)."""
    LOOKED.extend(look(ctx.task_id) for look in LOOKS)
    return Cards(devices=[(d.worker, d.gpu_id) for d in ctx.devices])


@dataclass
class Member:
    """One worker of the host: its service, runner, heartbeat and lends."""

    name: str
    service: Service
    runner: JobRunner
    presence: Presence
    lends: Lends
    heard: list[str | None] = field(default_factory=list)


def member(redis_url: str, name: str, **overrides: object) -> Member:
    """A worker of the host, its jobs run inline (its settings as given besides)."""
    settings = Settings(
        redis_url=redis_url,
        users_file=FIXTURES,
        worker_queues="short",
        worker_name=name,
        drain_max_s=0,
        **overrides,  # type: ignore[arg-type]
    )  # type: ignore[call-arg]
    executor = InlineExecutor(Registry([cards]))
    service, runner = build_worker(
        settings, Accounts.load(FIXTURES), executor=executor, place=PLACE
    )
    presence = Presence(service.recorder.redis, name, ["short"], 10.0, PLACE)
    heard: list[str | None] = []

    def lent(task_id: str | None) -> None:
        heard.append(task_id)
        presence.lent(task_id)

    lends = Lends([service.queues["short"]], runner.executor, name, 30.0, lent=lent)
    return Member(name, service, runner, presence, lends, heard)


@pytest.fixture
def host(redis_url: str) -> Iterator[tuple[Member, Member]]:
    pair = (member(redis_url, "w1@node-a"), member(redis_url, "w2@node-a"))
    yield pair
    for one in pair:
        one.service.close()


def submit(r: redis.Redis, m: Member, job_id: str, gpus: int) -> None:
    """A job of `gpus` cards as the API writes and queues it."""
    fields = {"task_id": job_id, "owner": OWNER, "kind": "short", "duration_s": "10.0"}
    more = {"type": "cards", "status": "PENDING", "attempts": 0, "enqueued_at": 1.0, "gpus": gpus}
    r.hset(job_key(job_id), mapping={**fields, **more})
    r.set(input_key(job_id), "{}")
    item = m.service.job_item("short", job_id, 10.0, gpus=gpus)
    m.service.queues["short"].enqueue(OWNER, [item])


def direct_messages(r: redis.Redis, m: Member) -> list[dict[str, object]]:
    """The messages waiting in the worker's own Celery queue (kombu's Redis list), their
    kwargs decoded."""
    raw = r.lrange(f"{m.name}.dq2", 0, -1)
    bodies = [json.loads(base64.b64decode(json.loads(message)["body"])) for message in raw]
    return [body[1] for body in bodies]


def test_a_job_of_two_cards_is_led_by_one_worker_and_lent_the_others_card(
    r: redis.Redis, host: tuple[Member, Member]
) -> None:
    first, second = host
    submit(r, first, "G1", gpus=2)
    for _ in range(3):  # both cards live, then the claim, then the lend said clean
        first.lends.tick()
        second.lends.tick()
    leader, lender = (first, second) if "G1" in first.runner.executor.led else (second, first)
    assert "G1" in leader.runner.executor.led and "G1" not in lender.runner.executor.led
    assert lender.heard == ["G1"] and leader.heard == []
    seen = Seen.read(lender.name, r.hget(WORKERS, lender.name) or b"")
    assert seen.lent_to == "G1"  # its heartbeat says to which job its card is lent
    queue = leader.service.queues["short"]
    assert queue.lenders_ready("G1")
    placement = queue.placement("G1")
    assert placement is not None and placement.workers == (leader.name, lender.name)

    (held,) = direct_messages(r, leader)  # the claimed lease, sent to the leader's own queue
    assert direct_messages(r, lender) == []

    def running_devices(job_id: str) -> object:
        job = JobRecorder(r, leader.service.settings).get(job_id)
        result = None if job is None else job.status_view().result
        return None if result is None else [[d.worker, d.gpu_id] for d in result.devices or []]

    LOOKS.append(running_devices)
    try:
        leader.service.tasks["short"].celery_task.apply(kwargs={LEASE_KWARG: held[LEASE_KWARG]})
    finally:
        LOOKS.clear()

    job = JobRecorder(r, leader.service.settings).get("G1")
    assert job is not None and job.output is not None
    pairs = [[leader.name, None], [lender.name, None]]
    assert json.loads(job.output) == {"devices": pairs}
    assert LOOKED.pop() == pairs  # its status named both cards while it ran
    result = job.status_view().result
    assert result is not None and result.devices is not None
    assert [[d.worker, d.gpu_id] for d in result.devices] == pairs
    assert (result.worker, result.gpu_id) == (leader.name, None)
    assert queue.placement("G1") is None  # the ack freed both cards
    lender.lends.tick()
    assert lender.heard == ["G1", None]  # the lend ended: the card takes jobs again
    assert Seen.read(lender.name, r.hget(WORKERS, lender.name) or b"").lent_to is None


def test_a_job_of_one_card_asks_nothing_of_the_placement(
    r: redis.Redis, host: tuple[Member, Member]
) -> None:
    first, _ = host
    submit(r, first, "S1", gpus=1)
    first.service.tasks["short"].celery_task.apply()
    job = JobRecorder(r, first.service.settings).get("S1")
    assert job is not None and job.output is not None
    assert json.loads(job.output) == {"devices": [[first.name, None]]}
    assert r.hget(job_key("S1"), "devices") is None  # its worker and gpu_id say it


def test_a_stopping_worker_leaves_its_slot(r: redis.Redis, host: tuple[Member, Member]) -> None:
    first, second = host
    first.lends.tick()
    second.lends.tick()
    slots = f"{first.service.queues['short'].keys.fleet}slots:node-a"
    assert r.hlen(slots) == 2
    first.lends.stop()
    assert r.hlen(slots) == 1


@pytest.mark.integration
def test_a_worker_restarted_on_a_lent_card_retires_the_child_it_started(
    r: redis.Redis, host: tuple[Member, Member]
) -> None:
    first, second = host
    submit(r, first, "G1", gpus=2)
    for _ in range(3):
        first.lends.tick()
        second.lends.tick()
    lender = second if "G1" in first.runner.executor.led else first
    warm = child(None)  # the restarted worker's, started as its main starts it
    try:
        warm.start()
        again = Lends(
            [lender.service.queues["short"]], Devices(warm, lender.name, None), lender.name, 30.0
        )
        again.tick()  # said clean by the worker it replaces: its child goes all the same
        assert warm.pid is None and again.lent_to == "G1"
    finally:
        warm.close()
