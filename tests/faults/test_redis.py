"""Redis killed, down, or cut off in the middle of a submit: accepted jobs survive, refused ones
leave nothing behind, and every process recovers without a restart."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from app.store.hooks import hooks_lua
from app.vtrr.lua_text import library_name, wire_name
from tests.faults.conftest import DEMO_KEY, OTHER_KEY, TEAM_KEY, Faults, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]

#: The fair queue's operations on the job's path (FCALL on Redis 7, EVALSHA on 6.2), with the
#: hooks they run with: the job store's, for the API's enqueue (which writes the job's record
#: too) as for the workers' step (which starts and ends it).
QUEUE_OPERATIONS = {"enqueue": hooks_lua(), "step": hooks_lua()}


def has_functions(faults: Faults) -> bool:
    """Whether the stack's Redis runs the fair queue's operations as functions (Redis 7)."""
    return int(str(faults.r.info("server")["redis_version"]).split(".")[0]) >= 7


def wire(faults: Faults, name: str) -> bytes:
    """What names an operation in the command that runs it."""
    return wire_name(name, has_functions(faults), QUEUE_OPERATIONS[name]).encode()


def assert_unavailable(reply: httpx.Response) -> None:
    """A 503 that a client can act on: JSON body with a detail, and Retry-After."""
    assert reply.status_code == 503, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert int(reply.headers["retry-after"]) > 0
    assert reply.json()["detail"]


def test_redis_sigkilled_and_restarted_from_its_aof_loses_no_accepted_job(
    make_faults: Callable[..., Faults],
) -> None:
    faults = make_faults(workers=2)
    accepted = {
        key: [faults.submit(key, duration_s=1.0) for _ in range(3)] for key in (DEMO_KEY, OTHER_KEY)
    }
    wait_for(
        lambda: any(faults.started(DEMO_KEY, t) for t in accepted[DEMO_KEY]),
        what="a job to be running at the kill",
    )
    pids = faults.worker_pids()
    api_pid = faults.stack.api.pid  # type: ignore[union-attr]
    run_id = faults.r.info("server")["run_id"]

    faults.redis_server.kill()  # SIGKILL: no shutdown, no final fsync
    wait_for(lambda: faults.health() == 503, timeout=20, what="/health to say Redis is down")
    faults.redis_server.start()  # same port, same directory: replays appendonlydir
    assert faults.r.info("server")["run_id"] != run_id  # a new process: its script cache is empty

    for key, task_ids in accepted.items():
        states = faults.wait_all(key, task_ids, timeout=60)
        assert {s["status"] for s in states.values()} == {"SUCCESS"}, states
        assert sorted(faults.billed_ids(key)) == sorted(task_ids)  # each billed exactly once
        attempts = [s["attempts"] for s in states.values()]
        print(f"\nattempts of {key}'s jobs across the Redis restart: {attempts}")

    late = faults.submit(TEAM_KEY, duration_s=0.2)
    assert wait_for(lambda: faults.finished(TEAM_KEY, late), timeout=30)["status"] == "SUCCESS"
    # Every script the job's path runs was loaded again by the service itself (NOSCRIPT); the
    # fair queue's function library, where Redis has functions, came back with the AOF or was
    # loaded again by the service.
    if has_functions(faults):
        libraries = {
            dict(zip(e[::2], e[1::2], strict=True))["library_name"]
            for e in faults.r.function_list()
        }
        assert library_name(hooks_lua()) in libraries
    else:
        scripts = {n: wire_name(n, False, hooks) for n, hooks in QUEUE_OPERATIONS.items()}
        loaded = faults.r.script_exists(*scripts.values())
        assert dict(zip(scripts, loaded, strict=True)) == dict.fromkeys(scripts, True)
    # Nobody was restarted.
    assert faults.worker_pids() == pids
    assert all(p.poll() is None for p in faults.stack.workers.values())
    assert faults.stack.api.pid == api_pid and faults.stack.api.poll() is None  # type: ignore[union-attr]
    wait_for(faults.drained, timeout=10, what="both fair queues to empty")


def test_submit_while_redis_is_down_is_a_503_that_writes_nothing_and_all_recover(
    make_faults: Callable[..., Faults],
) -> None:
    faults = make_faults(workers=1)
    first = faults.submit(DEMO_KEY)
    assert wait_for(lambda: faults.finished(DEMO_KEY, first), timeout=30)["status"] == "SUCCESS"
    records = faults.job_ids()

    faults.redis_server.kill()
    began = time.monotonic()
    reply = faults.post(DEMO_KEY)
    print(f"\n503 after {time.monotonic() - began:.2f} s with Redis down")
    assert_unavailable(reply)
    wait_for(lambda: faults.health() == 503, timeout=20, what="/health to say Redis is down")
    faults.redis_server.start()

    assert faults.job_ids() == records  # no record of the refused request
    assert faults.drained()  # and no queue item
    wait_for(lambda: faults.health() == 200, timeout=20, what="/health 200 again")
    again = faults.submit(DEMO_KEY)
    assert wait_for(lambda: faults.finished(DEMO_KEY, again), timeout=30)["status"] == "SUCCESS"
    assert faults.job_ids() == {*records, again}
    assert sorted(faults.billed_ids(DEMO_KEY)) == sorted([first, again])


def test_redis_gone_for_a_moment_while_a_job_runs_does_not_fail_the_job(
    make_faults: Callable[..., Faults],
) -> None:
    # A lease that outlasts the outage and a busy machine's reconnection: the run stops by
    # itself once it cannot renew its lease for LEASE_SECONDS less a margin (the watchdog,
    # docs/reliability.md), which with the suite's 2 s lease is 1.25 s, less than a loaded
    # machine may take to see Redis again.
    faults, first = proxied_stack_with_one_job_done(make_faults, lease_seconds=8.0)
    assert faults.proxy is not None
    # long enough that the cut comes while it runs, however slowly its start is seen
    task_id = faults.submit(DEMO_KEY, duration_s=10.0)
    wait_for(lambda: faults.started(DEMO_KEY, task_id), what="the job to start")

    # The running job's next cancel check finds Redis gone; it comes back within the lease.
    faults.proxy.cut_before(b"HEXISTS")
    wait_for(faults.proxy.fired.is_set, timeout=10, what="the cancel check to hit the cut")
    time.sleep(0.5)  # Redis stays away this long: the outage under test, not a wait
    faults.proxy.heal()
    wait_for(lambda: faults.health() == 200, timeout=20, what="/health 200 again")

    done = wait_for(lambda: faults.finished(DEMO_KEY, task_id), timeout=60, what="the job's end")
    assert (done["status"], done["attempts"]) == ("SUCCESS", 1), done
    assert sorted(faults.billed_ids(DEMO_KEY)) == sorted([first, task_id])
    wait_for(faults.drained, timeout=10, what="both fair queues to empty")


def proxied_stack_with_one_job_done(
    make_faults: Callable[..., Faults], **overrides: object
) -> tuple[Faults, str]:
    """A stack whose processes reach Redis through a proxy, after one job has run through it
    (so every script and function is loaded and the next call is the real thing)."""
    faults = make_faults(workers=1, proxied=True, **overrides)
    first = faults.submit(DEMO_KEY)
    assert wait_for(lambda: faults.finished(DEMO_KEY, first), timeout=30)["status"] == "SUCCESS"
    return faults, first


def cut_off_before_the_submit_s_call(faults: Faults, idempotency_key: str | None) -> None:
    """Submit while Redis "goes down" just before the submit's one call arrives: a 503; then
    Redis comes back."""
    assert faults.proxy is not None
    faults.proxy.cut_before(wire(faults, "enqueue"))
    reply = faults.post(DEMO_KEY, idempotency_key=idempotency_key)
    assert faults.proxy.fired.is_set()
    assert_unavailable(reply)
    faults.proxy.heal()
    wait_for(lambda: faults.health() == 200, timeout=20, what="/health 200 again")


def assert_never_half_done(faults: Faults, records: set[str]) -> set[str]:
    """Once both queues are empty, every job written since `records` has run: none was written
    without its queue item (it would wait PENDING for ever). The new jobs."""
    wait_for(faults.drained, timeout=30, what="both fair queues to empty")
    written = faults.job_ids() - records
    assert {t: faults.job(t)["status"] for t in written} == dict.fromkeys(written, "SUCCESS")
    return written


def test_redis_lost_before_the_submit_s_one_call_writes_nothing_and_all_recover(
    make_faults: Callable[..., Faults],
) -> None:
    faults, first = proxied_stack_with_one_job_done(make_faults)
    records = faults.job_ids()
    assert first in records
    cut_off_before_the_submit_s_call(faults, idempotency_key=None)
    assert faults.job_ids() == records  # no record of the refused request
    assert faults.drained()  # and no queue item

    again = faults.submit(DEMO_KEY)  # the service recovered by itself
    assert wait_for(lambda: faults.finished(DEMO_KEY, again), timeout=30)["status"] == "SUCCESS"
    assert assert_never_half_done(faults, records) == {again}


def test_submit_cut_off_then_replayed_with_its_idempotency_key_runs_once(
    make_faults: Callable[..., Faults],
) -> None:
    faults, first = proxied_stack_with_one_job_done(make_faults)
    records = faults.job_ids()
    cut_off_before_the_submit_s_call(faults, idempotency_key="fault-replay-1")

    replay = faults.post(DEMO_KEY, idempotency_key="fault-replay-1")
    assert replay.status_code == 200, replay.text
    task_id = replay.json()["task_id"]
    done = wait_for(lambda: faults.finished(DEMO_KEY, task_id), timeout=30, what="the replay")
    assert (done["status"], done["attempts"]) == ("SUCCESS", 1)
    assert sorted(faults.billed_ids(DEMO_KEY)) == sorted([first, task_id])
    assert assert_never_half_done(faults, records) == {task_id}


def test_submit_whose_redis_reply_is_lost_is_answered_200_or_503_never_half_done(
    make_faults: Callable[..., Faults],
) -> None:
    faults, first = proxied_stack_with_one_job_done(make_faults)
    assert faults.proxy is not None
    records = faults.job_ids()

    # The call runs in Redis (record and item together), then the connection drops before its
    # reply arrives.
    faults.proxy.drop_reply(wire(faults, "enqueue"))
    reply = faults.post(DEMO_KEY)
    assert faults.proxy.fired.is_set()
    assert reply.status_code in (200, 503), f"{reply.status_code} {reply.text}"
    if reply.status_code == 503:
        assert_unavailable(reply)
    written = assert_never_half_done(faults, records)
    assert len(written) == 1  # the call ran once, whatever the client heard
    if reply.status_code == 200:
        assert written == {reply.json()["task_id"]}
    assert sorted(faults.billed_ids(DEMO_KEY)) == sorted([first, *written])


def test_submit_whose_reply_is_lost_then_replayed_gets_the_job_the_lost_call_made(
    make_faults: Callable[..., Faults],
) -> None:
    faults, first = proxied_stack_with_one_job_done(make_faults)
    assert faults.proxy is not None
    records = faults.job_ids()
    faults.proxy.drop_reply(wire(faults, "enqueue"))
    lost = faults.post(DEMO_KEY, idempotency_key="fault-replay-2")
    assert faults.proxy.fired.is_set()
    assert lost.status_code in (200, 503), f"{lost.status_code} {lost.text}"

    replay = faults.post(DEMO_KEY, idempotency_key="fault-replay-2")
    assert replay.status_code == 200, replay.text
    task_id = replay.json()["task_id"]
    assert assert_never_half_done(faults, records) == {task_id}  # one job, the lost call's
    assert faults.job(task_id)["attempts"] == "1"
    assert sorted(faults.billed_ids(DEMO_KEY)) == sorted([first, task_id])
