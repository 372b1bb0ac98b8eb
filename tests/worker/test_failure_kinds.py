"""A job type's own failure kinds (JobFailedError) and the facts it notes of its run (ctx.note),
carried from its code to the job's record and its status: through the worker's real step in
process (the runner, the queues, the store, the bill), and through a real job child, whose
facts survive a kill."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from app.models import ScriptEnvironment, Status, TaskStatus
from app.store.keys import events_key, input_key, job_key
from app.store.record import JobRecord, decode
from app.worker.calls import Call
from app.worker.child import JobChild
from app.worker.facts import MAX_FACTS_BYTES, RunFacts
from tests.support import bills_of
from tests.worker.noting import TYPES
from tests.worker.support import ALICE, BOB, Worker


@pytest.fixture
def make_worker(worker: Callable[..., Worker], tmp_path: Path) -> Callable[[], Worker]:
    def make() -> Worker:
        return worker(drain=True, types=TYPES, artifacts_dir=tmp_path, heartbeat_seconds=0.1)

    return make


def status(r: redis.Redis, name: str) -> TaskStatus:
    return JobRecord.parse(r.hgetall(job_key(name))).status_view()


def ran(w: Worker, r: redis.Redis, name: str, job_type: str, inp: object = None) -> TaskStatus:
    """The status of a job of job_type, once a trigger has run it."""
    w.submit(r, "short", name, job_type=job_type, duration_s=5)
    r.set(input_key(name), json.dumps(inp or {}))
    w.trigger("short")
    return status(r, name)


def test_a_failure_the_type_names_ends_the_job_with_its_kind_and_its_noted_exit_code(
    make_worker: Callable[[], Worker], r: redis.Redis
) -> None:
    job = ran(make_worker(), r, "J1", "exits", {"code": 3})
    assert (job.status, job.error_kind) == (Status.FAILURE, "exit_code")
    assert job.error == "the script exited with code 3"  # its message, not a traceback
    assert job.result is not None
    assert (job.result.exit_code, job.result.environment) == (3, None)
    assert [b.task_id for b in bills_of(r, ALICE)] == ["J1"]  # billed as any failure
    # the stream's copy of the job (what SSE sends) says so too
    entries = r.xrevrange(events_key("J1"), count=1)
    assert entries and entries[0][1] is not None
    streamed = JobRecord.parse(decode(entries[0][1])).status_view()
    assert streamed.result is not None and streamed.result.exit_code == 3


def test_an_environment_that_could_not_be_built_fails_environment_billed(
    make_worker: Callable[[], Worker], r: redis.Redis
) -> None:
    job = ran(make_worker(), r, "J1", "no-environment")
    assert (job.status, job.error_kind) == (Status.FAILURE, "environment")
    assert job.error is not None and job.error.startswith("the environment could not be built")
    assert job.result is not None and job.result.exit_code is None
    assert job.result.environment == ScriptEnvironment(cached=False, seconds=0.25)
    assert [b.task_id for b in bills_of(r, ALICE)] == ["J1"]


def test_a_success_shows_its_facts_the_last_note_of_a_name_winning(
    make_worker: Callable[[], Worker], r: redis.Redis
) -> None:
    job = ran(make_worker(), r, "J1", "cached")
    assert (job.status, job.error_kind) == (Status.SUCCESS, None)
    assert job.result is not None and job.result.exit_code == 0
    assert job.result.environment == ScriptEnvironment(cached=True, seconds=0.0)


def test_facts_noted_before_a_cancel_show_on_the_revoked_job(
    make_worker: Callable[[], Worker], r: redis.Redis, redis_url: str
) -> None:
    job = ran(make_worker(), r, "J1", "noted-then-cancelled", {"redis_url": redis_url})
    assert (job.status, job.error_kind) == (Status.REVOKED, "cancelled")
    assert job.result is not None and job.result.exit_code == -15
    assert job.result.environment == ScriptEnvironment(cached=True, seconds=0.0)
    assert [b.task_id for b in bills_of(r, ALICE)] == ["J1"]  # the owner's cancel is billed


def test_a_preempted_runs_facts_give_way_to_the_next_runs(
    make_worker: Callable[[], Worker], r: redis.Redis, redis_url: str
) -> None:
    w = make_worker()
    w.submit(r, "short", "J1", job_type="yields-then-notes", duration_s=20)
    r.set(input_key("J1"), json.dumps({"redis_url": redis_url}))
    r.hset(job_key("J1"), "preemptible", "1")  # what the API writes for a preemptible job
    w.submit(r, "short", "OWED", owner=BOB, job_type="noted", duration_s=1)
    w.service.queues["short"].promote("J1")
    w.trigger("short")
    job = status(r, "J1")
    assert (job.status, job.preemptions) == (Status.SUCCESS, 1)
    assert job.result is not None
    assert job.result.exit_code is None  # the first run's code is not the job's
    assert job.result.environment == ScriptEnvironment(cached=True, seconds=0.0)


def test_a_job_that_notes_nothing_shows_no_facts(
    make_worker: Callable[[], Worker], r: redis.Redis
) -> None:
    job = ran(make_worker(), r, "J1", "noted")
    assert job.status is Status.SUCCESS and job.result is not None
    assert (job.result.exit_code, job.result.environment) == (None, None)
    assert not r.hexists(job_key("J1"), "facts")


def test_run_facts_keep_the_last_value_of_each_name_and_tell_each_set() -> None:
    told: list[str] = []
    facts = RunFacts(told.append)
    assert facts.text() is None
    facts.note({"exit_code": 1, "environment": {"cached": False, "seconds": 2.5}})
    facts.note({"exit_code": 0})
    assert json.loads(facts.text() or "") == {
        "exit_code": 0,
        "environment": {"cached": False, "seconds": 2.5},
    }
    assert [json.loads(text)["exit_code"] for text in told] == [1, 0]


@pytest.mark.parametrize(
    ("facts", "error"),
    [
        ({"when": object()}, TypeError),
        ({"ratio": float("nan")}, TypeError),
        ({"words": "x" * MAX_FACTS_BYTES}, ValueError),
    ],
)
def test_facts_that_are_not_json_or_too_big_are_refused_and_nothing_is_noted(
    facts: dict[str, object], error: type[Exception]
) -> None:
    told: list[str] = []
    noted = RunFacts(told.append)
    noted.note({"exit_code": 2})
    with pytest.raises(error):
        noted.note(facts)
    assert (noted.text(), len(told)) == ('{"exit_code":2}', 1)


@pytest.mark.parametrize(
    "facts",
    ["not json", "[1, 2]", '{"exit_code": true, "environment": {"cached": "maybe"}}', '{"x": 1}'],
)
def test_a_status_survives_facts_it_cannot_read(facts: str) -> None:
    fields = {
        "task_id": "J1", "owner": ALICE, "kind": "short", "status": "FAILURE",
        "duration_s": "5", "enqueued_at": "1", "started_at": "2", "facts": facts,
    }  # fmt: skip
    result = JobRecord.parse(fields).status_view().result
    assert result is not None
    assert (result.exit_code, result.environment) == (None, None)


# Through a real job child: what it notes goes over the pipe as it is noted.

MODULES = ["tests.worker.noting"]
GRACE_S = 0.3


@pytest.fixture(scope="module")
def child() -> Iterator[JobChild]:
    made = JobChild(MODULES, None, timeout_grace_s=GRACE_S, cancel_grace_s=GRACE_S)
    yield made
    made.close()


def after_polls(polls: int) -> Callable[[], bool]:
    """A should_stop that turns true on its polls-th call: the job has been running a while."""
    seen = 0

    def should_stop() -> bool:
        nonlocal seen
        seen += 1
        return seen >= polls

    return should_stop


def call(type_: str, inp: object = None) -> Call:
    return Call("J1", type_, json.dumps(inp or {}), 10.0, None)


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_childs_job_failure_ends_with_its_kind_its_message_and_its_facts(
    child: JobChild,
) -> None:
    ended = child.run(call("exits", {"code": 3}), lambda: False)
    assert (ended.end, ended.error, ended.trace) == (
        "exit_code",
        "the script exited with code 3",
        None,
    )
    assert json.loads(ended.facts or "") == {"exit_code": 3}


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_childs_job_keeps_its_facts_through_a_cancel(child: JobChild) -> None:
    ended = child.run(call("noted-then-cancelled"), after_polls(3))
    assert ended.end == "cancelled"
    assert json.loads(ended.facts or "")["exit_code"] == -15


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_childs_job_killed_for_its_ignored_cancel_keeps_its_facts(
    child: JobChild,
) -> None:
    ended = child.run(call("noted-then-deaf"), after_polls(3))
    assert ended.end == "cancelled" and "killed" in (ended.error or "")
    assert json.loads(ended.facts or "") == {"exit_code": -9}
