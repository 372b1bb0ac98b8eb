"""A run lost with its worker, through real processes: its job is PENDING, with no worker, as
soon as its lapsed lease is reclaimed, and goes back to the front of its account's line, so an
account limited to one running job never shows two."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.artifacts import CHECKPOINTS
from app.store.keys import events_key, job_key
from app.worker import copies, reaper
from tests.faults.conftest import DEMO_KEY, OTHER_KEY, USER_OF, Faults, wait_for
from tests.jobs.sample import STEP_FILE, STEP_S

SAMPLE = "tests.jobs.sample"

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]


def short_name(worker: str) -> str:
    return worker.split("@", 1)[0]


def statuses(faults: Faults, task_id: str) -> list[dict[str, str]]:
    """The job's status events, in order, as its stream holds them (what the SSE streams
    send), without its progress and log events."""
    entries = faults.r.xrange(events_key(task_id))
    return [fields for _, fields in entries if "status" in fields]


def test_a_killed_worker_s_job_is_pending_with_no_worker_until_a_worker_starts_it_again(
    make_faults: Callable[..., Faults],
) -> None:
    faults = make_faults(workers=1)
    task_id = faults.submit(DEMO_KEY, kind="long", duration_s=8)
    first = wait_for(lambda: faults.started(DEMO_KEY, task_id), what="the first run")
    name = short_name(first["result"]["worker"])
    faults.stack.kill_worker(name)  # the only worker: nobody starts the job again meanwhile

    def pending() -> dict[str, Any] | None:
        state = faults.status(DEMO_KEY, task_id)
        return state if state["status"] == "PENDING" else None

    waiting = wait_for(pending, timeout=30, what="the job PENDING once its lease is reclaimed")
    assert waiting["attempts"] == 1  # the lost run is an attempt
    assert waiting["result"] is None or "worker" not in (waiting["result"] or {})
    assert waiting["waiting_for"] == "gpu"  # no worker alive: it waits for one, first in line
    listed = faults.call("GET", "/tasks", DEMO_KEY, params={"status": "PENDING"}, timeout=30)
    assert task_id in {job["task_id"] for job in listed.json()["tasks"]}
    record = faults.job(task_id)
    assert not {"worker", "token", "started_at"} & set(record)

    faults.stack.start_worker(name)
    done = wait_for(lambda: faults.finished(DEMO_KEY, task_id), timeout=60, what="the rerun")
    assert (done["status"], done["attempts"]) == ("SUCCESS", 2)
    assert [b["task_id"] for b in faults.bills(DEMO_KEY)] == [task_id]


def test_an_account_limited_to_one_running_job_never_shows_two_when_its_worker_dies(
    make_faults: Callable[..., Faults],
) -> None:
    """A lost run's job goes back to the front of its account's line: the other worker runs
    it again before the account's next job, which its limit holds back all along."""
    faults = make_faults(workers=2)
    other = USER_OF[OTHER_KEY]
    reply = httpx.patch(
        f"{faults.stack.url}/admin/accounts/{other}",
        headers={"X-API-Key": DEMO_KEY},
        json={"max_running": 1},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    first = faults.submit(OTHER_KEY, kind="long", duration_s=4)
    second = faults.submit(OTHER_KEY, kind="long", duration_s=1)
    started = wait_for(lambda: faults.started(OTHER_KEY, first), what="the first job's run")
    victim = short_name(started["result"]["worker"])
    faults.stack.kill_worker(victim)

    seen: list[tuple[str, str]] = []

    def both_ended() -> bool:
        # both records read at one instant (one transaction): two GETs in turn could see the
        # first job running, then the second started after the first had ended
        with faults.r.pipeline(transaction=True) as pipe:
            for task_id in (first, second):
                pipe.hget(job_key(task_id), "status")
            now = tuple(pipe.execute())
        seen.append(now)
        return all(s in ("SUCCESS", "FAILURE", "REVOKED") for s in now)

    deadline = time.monotonic() + 60
    while not both_ended():
        assert time.monotonic() < deadline, f"both jobs to end; seen {seen[-1]}"
    assert ("STARTED", "STARTED") not in seen, seen

    runs = [s for s in statuses(faults, first) if s["status"] == "STARTED"]
    assert len(runs) == 2  # the lost run, then the rerun
    lost_at = next(
        i
        for i, s in enumerate(statuses(faults, first))
        if s["status"] == "PENDING" and s.get("attempts") == "1"
    )
    assert "worker" not in statuses(faults, first)[lost_at]  # PENDING with no worker first
    rerun_at = float(runs[1]["started_at"])
    second_at = float(faults.status(OTHER_KEY, second)["result"]["started_at"])
    assert rerun_at < second_at  # the lost job first: its turn had come
    assert sorted(faults.billed_ids(OTHER_KEY)) == sorted([first, second])


def submit_typed(faults: Faults, job_type: str, inp: dict[str, Any], duration_s: float) -> str:
    reply = faults.call(
        "POST",
        "/enqueue-task",
        DEMO_KEY,
        json={"type": job_type, "input": inp, "duration_s": duration_s},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["task_id"])


def job_child(worker_pid: int) -> int:
    """The pid of a worker's warm child (spawned by multiprocessing)."""
    [pid] = [
        pid
        for pid in reaper.children(worker_pid)
        if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    return pid


def copies_in(root: Path) -> list[Path]:
    """The runs' checkpoint copies of a job, oldest first (none: no checkpoint)."""
    return [copy for _, copy in copies.runs(root)] if root.is_dir() else []


def step_of(copy: Path) -> int | None:
    """The next step a run's checkpoint copy says to take (None: none written yet)."""
    try:
        return int(json.loads((copy / STEP_FILE).read_text())["next"])
    except (OSError, ValueError):
        return None


def test_a_frozen_worker_s_run_stops_before_its_rerun_starts_and_writes_nothing_on_waking(
    make_faults: Callable[..., Faults],
) -> None:
    """SIGSTOP the worker of a preemptible job that checkpoints: its child stops the run
    before the lease lapses (the watchdog), the rerun elsewhere resumes from that run's
    checkpoint in a copy of its own, and the thawed worker writes nothing to the job's record."""
    faults = make_faults(workers=2, job_modules=[SAMPLE])
    task_id = submit_typed(faults, "checkpointed", {"steps": 160}, duration_s=30)
    first = wait_for(lambda: faults.started(DEMO_KEY, task_id), what="the first run")
    victim = short_name(first["result"]["worker"])
    frozen = faults.stack.workers[victim]
    root = faults.stack.workdir / "artifacts" / CHECKPOINTS / task_id
    wait_for(lambda: (found := copies_in(root)) and step_of(found[0]), what="a checkpoint")
    child = job_child(frozen.pid)
    os.kill(frozen.pid, signal.SIGSTOP)  # its child runs on: only its watchdog can stop it
    try:
        rerun = wait_for(
            lambda: (
                (s := faults.status(DEMO_KEY, task_id))["attempts"] == 2
                and s["status"] == "STARTED"
                and s
            ),
            timeout=30,
            what="the rerun on the other worker",
        )
        assert not reaper.alive(child)  # the stale run was gone when its rerun was seen running
        stale, ours = copies_in(root)
        stale_step, stale_written = step_of(stale), (stale / STEP_FILE).stat().st_mtime
        assert stale_written < float(rerun["result"]["started_at"])
        wait_for(lambda: (step_of(ours) or 0) > (stale_step or 0), what="the rerun's steps")
        assert step_of(stale) == stale_step  # never written again: the copies do not mix
        assert (stale / STEP_FILE).stat().st_mtime == stale_written
        done = wait_for(lambda: faults.finished(DEMO_KEY, task_id), timeout=60, what="its end")
        settled = faults.job(task_id)
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    assert (done["status"], done["attempts"]) == ("SUCCESS", 2)
    assert done["result"]["output"]["resumed_at"] == stale_step  # from the lost run's checkpoint
    wait_for(
        lambda: "lease lapsed" in faults.stack.log_of(victim),
        timeout=20,
        what="the thawed worker to give the run up",
    )
    assert faults.job(task_id) == settled  # the stale worker wrote nothing
    assert faults.billed_ids(DEMO_KEY) == [task_id]
    assert frozen.poll() is None  # the thawed worker lives on


def test_a_finished_preemptible_job_leaves_no_checkpoint(
    make_faults: Callable[..., Faults],
) -> None:
    faults = make_faults(workers=1, job_modules=[SAMPLE])
    task_id = submit_typed(faults, "checkpointed", {"steps": 60}, duration_s=10)
    root = faults.stack.workdir / "artifacts" / CHECKPOINTS / task_id
    wait_for(lambda: (found := copies_in(root)) and step_of(found[0]), what="a checkpoint")
    done = wait_for(lambda: faults.finished(DEMO_KEY, task_id), timeout=60, what="its end")
    assert done["status"] == "SUCCESS"
    # The worker removes it once the end is recorded, so just after the status reads SUCCESS.
    wait_for(lambda: not root.exists(), what="its checkpoint folder removed")


def test_a_killed_run_is_billed_up_to_its_checkpoint_and_its_rerun_resumes_from_it(
    make_faults: Callable[..., Faults],
) -> None:
    """A job whose first run is SIGKILLed with its worker after it checkpointed: the rerun
    goes on from that checkpoint, and the one bill counts the lost run's work up to it (as its
    worker last saw it, at most a heartbeat before the kill) plus the rerun's."""
    faults = make_faults(workers=2, job_modules=[SAMPLE])
    steps = 80  # of STEP_S each, at least: 4 s of work in all
    task_id = submit_typed(faults, "checkpointed", {"steps": steps}, duration_s=30)
    first = wait_for(lambda: faults.started(DEMO_KEY, task_id), what="the first run")
    wait_for(
        lambda: float(faults.job(task_id).get("checkpoint_s", 0)) >= 1.5,
        what="the worker to note 1.5 s of checkpointed work",
    )
    faults.stack.kill_worker(short_name(first["result"]["worker"]))

    done = wait_for(lambda: faults.finished(DEMO_KEY, task_id), timeout=60, what="the rerun")
    assert (done["status"], done["attempts"]) == ("SUCCESS", 2)
    resumed_at = done["result"]["output"]["resumed_at"]
    assert resumed_at >= 1.5 / STEP_S  # from the lost run's checkpoint, never from 0
    [bill] = faults.bills(DEMO_KEY)
    assert "over 2 runs" in bill["description"]
    heartbeat_s = faults.stack.settings.heartbeat_seconds
    # the lost run's steps up to its last noted checkpoint, and the rerun's from where it resumed
    assert bill["billed_seconds"] >= steps * STEP_S - heartbeat_s - STEP_S
