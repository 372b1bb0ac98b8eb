"""Workers that die, crash on a job every time, or freeze past their lease: nothing is lost or
billed twice."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from app.vtrr.keys import Keys
from tests.faults.conftest import (
    DEMO_KEY,
    FAULT_WORKER,
    OTHER_KEY,
    Faults,
    Supervisor,
    wait_for,
)
from tests.faults.worker_app import POISON_S, STUBBORN_S

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]


def short_name(worker: str) -> str:
    """cpu1@host -> cpu1, the stack's name of the worker."""
    return worker.split("@", 1)[0]


def test_sigkilled_worker_s_job_comes_back_within_the_lease_and_succeeds_with_one_bill(
    make_faults: Callable[..., Faults],
) -> None:
    faults = make_faults(workers=2)
    # long enough that the kill comes while it runs, however slowly its start is seen
    task_id = faults.submit(DEMO_KEY, kind="long", duration_s=8)
    first = wait_for(lambda: faults.started(DEMO_KEY, task_id), what="the first run")
    victim = short_name(first["result"]["worker"])
    killed_at = time.time()
    faults.stack.kill_worker(victim)  # SIGKILL, mid-job

    rerun = wait_for(
        lambda: (s := faults.status(DEMO_KEY, task_id))["attempts"] == 2 and s,
        timeout=30,
        what="the job to start again",
    )
    done = wait_for(lambda: faults.finished(DEMO_KEY, task_id), timeout=60, what="the rerun")
    recovery = rerun["result"]["started_at"] - killed_at
    print(f"\nSIGKILL -> job running again on another worker: {recovery:.2f} s (lease 2 s)")

    assert done["status"] == "SUCCESS"
    assert done["attempts"] == 2
    assert short_name(done["result"]["worker"]) != victim
    assert [b["task_id"] for b in faults.bills(DEMO_KEY)] == [task_id]
    assert faults.billed_ids(DEMO_KEY) == [task_id]
    wait_for(faults.drained, timeout=10, what="the lease to be acked")


def test_poison_job_fails_after_max_attempts_without_a_bill_while_others_jobs_flow(
    make_faults: Callable[..., Faults],
) -> None:
    faults = make_faults(workers=2, worker_module=FAULT_WORKER)
    with Supervisor(faults.stack) as supervisor:
        before = [faults.submit(OTHER_KEY, duration_s=0.3) for _ in range(4)]
        poison = faults.submit(DEMO_KEY, duration_s=POISON_S)
        after = [faults.submit(OTHER_KEY, duration_s=0.3) for _ in range(4)]

        failed = wait_for(
            lambda: faults.finished(DEMO_KEY, poison), timeout=90, what="the poison job to end"
        )
        others = faults.wait_all(OTHER_KEY, before + after, timeout=30)
        wait_for(faults.drained, timeout=10, what="both fair queues to empty")
        wait_for(lambda: len(supervisor.deaths) >= 3, timeout=10, what="the third death seen")
        deaths = list(supervisor.deaths)

    assert failed["status"] == "FAILURE"
    assert failed["attempts"] == 3
    assert failed["error"] == "the worker running it was lost 3 times"
    # Three runs, three dead workers, and no fourth run: no endless loop.
    assert len(faults.runs(poison)) == 3
    assert [code for _, code in deaths] == [-signal.SIGKILL] * 3
    assert faults.billed_ids(DEMO_KEY) == []
    assert faults.bills(DEMO_KEY) == []
    assert not faults.billed_marker(poison)

    assert {s["status"] for s in others.values()} == {"SUCCESS"}
    assert {s["attempts"] for s in others.values()} == {1}
    assert sorted(faults.billed_ids(OTHER_KEY)) == sorted(before + after)
    # (its status has no result: its last run was lost, and a lost run's job is PENDING with
    # no worker until its next start, which failed it; its record says when)
    assert failed["result"] is None
    failed_at = float(faults.job(poison)["finished_at"])
    flowed = [t for t, s in others.items() if s["result"]["finished_at"] < failed_at]
    print(f"\n{len(flowed)} of the other account's 8 jobs ended while the poison job was alive")
    assert flowed, "the other account's jobs waited for the poison job to end"


def test_frozen_worker_s_late_completion_is_refused_by_the_lease_token(
    make_faults: Callable[..., Faults],
) -> None:
    faults = make_faults(workers=2, worker_module=FAULT_WORKER)
    # A stubborn run never sees the stop flag, so the stale run always reaches finish() on waking.
    task_id = faults.submit(DEMO_KEY, duration_s=STUBBORN_S)
    first = wait_for(lambda: faults.started(DEMO_KEY, task_id), what="the first run")
    victim = short_name(first["result"]["worker"])
    frozen = faults.stack.workers[victim]
    # STARTED is written before the workload begins: freeze the worker only once its workload
    # has recorded the run, or the run would be recorded after the rerun's, on waking.
    wait_for(lambda: faults.runs(task_id) == [first["result"]["worker"]], what="the run recorded")
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        done = wait_for(
            lambda: faults.finished(DEMO_KEY, task_id), timeout=30, what="another worker's run"
        )
        settled = faults.job(task_id)
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    refusal = "refused: another run owns the job"
    wait_for(lambda: refusal in faults.stack.log_of(victim), timeout=20, what="the stale finish")

    assert done["status"] == "SUCCESS"
    assert done["attempts"] == 2
    assert short_name(done["result"]["worker"]) != victim
    assert [short_name(w) for w in faults.runs(task_id)] == [
        victim,
        short_name(done["result"]["worker"]),
    ]
    assert faults.job(task_id) == settled  # the stale run changed nothing, not even a time
    assert faults.status(DEMO_KEY, task_id) == done
    assert faults.billed_ids(DEMO_KEY) == [task_id]
    assert [b["task_id"] for b in faults.bills(DEMO_KEY)] == [task_id]
    assert frozen.poll() is None  # the thawed worker lives on
    wait_for(faults.drained, timeout=10, what="the lease to be acked")


def test_a_worker_frozen_past_its_lease_ends_nothing_on_waking_and_its_rerun_is_billed_once(
    make_faults: Callable[..., Faults],
) -> None:
    faults = make_faults(workers=1, worker_module=FAULT_WORKER)
    task_id = faults.submit(DEMO_KEY, duration_s=STUBBORN_S)
    first = wait_for(lambda: faults.started(DEMO_KEY, task_id), what="the first run")
    name = first["result"]["worker"]
    frozen = faults.stack.workers[short_name(name)]
    wait_for(lambda: faults.runs(task_id) == [name], what="the run recorded")
    os.kill(frozen.pid, signal.SIGSTOP)  # the only worker: nobody runs the job meanwhile
    try:
        queue = Keys.for_queue("short")
        wait_for(lambda: faults.r.zcard(queue.queue) == 1, timeout=30, what="the lease reclaimed")
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    done = wait_for(lambda: faults.finished(DEMO_KEY, task_id), timeout=30, what="the rerun")

    assert (done["status"], done["attempts"]) == ("SUCCESS", 2)  # the woken run ended nothing
    assert faults.runs(task_id) == [name, name]
    [bill] = faults.bills(DEMO_KEY)
    assert bill["task_id"] == task_id
    assert bill["billed_seconds"] <= STUBBORN_S  # the rerun's seconds, never the frozen ones
    wait_for(faults.drained, timeout=10, what="the lease to be acked")
