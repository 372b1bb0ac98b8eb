"""A script job's stops through real processes (issue 40, "Stops are Slurm's"): a cancel sends
SIGTERM to the script's whole tree, a script that ignores it is killed after CANCEL_GRACE_S, a
job past its duration_s is asked to stop and ends FAILURE timeout, and a preemptible script
asked to yield checkpoints on SIGTERM, runs again later from its checkpoint, and is billed once.
Whatever way it ends, no process the script started outlives it: each test's script starts a
child and a daemon in a session of its own, named by a token on their command lines, and the
host's /proc holds none of them after the job ends."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import httpx
import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import (
    DEMO_KEY,
    OTHER_KEY,
    ended,
    host_processes,
    job,
    log_text,
    logged,
    run_script,
    script_stack,
    upload,
    wait_for,
)
from tests.e2e.test_jobs import bills, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
GRACE_S = 1.5  # CANCEL_GRACE_S and TIMEOUT_GRACE_S here
STEPS = 200  # of the checkpointing script's 0.05 s: a run of 10 s unpreempted
#: Starts a child and a double-forked daemon in a session of its own (each with the token on its
#: command line), then waits. "term": on SIGTERM it says so and exits; "ignore": the whole tree
#: ignores SIGTERM (the script says it got one and goes on).
STOPS = b"""\
import os, signal, subprocess, sys, time
token, mode = sys.argv[1], sys.argv[2]
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the child and the daemon
sleeper = [sys.executable, "-c", "import time; time.sleep(600)", token]
child = subprocess.Popen(sleeper + ["child"])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, sleeper + ["daemon"])
    os._exit(0)
def on_term(signum, frame):
    print("got SIGTERM", flush=True)
    if mode == "term":
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(0.1)
"""
#: Counts STEPS steps of 0.05 s; on SIGTERM saves its step in its checkpoint folder and exits.
#: A run reads the checkpoint a run before it left.
CHECKPOINTED = b"""\
import json, os, signal, sys, time
steps = int(sys.argv[1])
path = os.path.join(os.environ["FAIRGPU_CHECKPOINT_DIR"], "state.json")
state = {"step": 0, "runs": 0}
if os.path.exists(path):
    with open(path) as f:
        state = json.load(f)
resumed_at = state["step"]
state["runs"] += 1
def on_term(signum, frame):
    with open(path + ".new", "w") as f:
        json.dump(state, f)
    os.replace(path + ".new", path)
    print(f"checkpointed at step {state['step']}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print(f"run {state['runs']} from step {resumed_at}", flush=True)
while state["step"] < steps:
    time.sleep(0.05)
    state["step"] += 1
seen = {"done": state["step"], "resumed_at": resumed_at, "runs": state["runs"],
        "preemptible": os.environ["FAIRGPU_PREEMPTIBLE"]}
with open(os.environ["FAIRGPU_OUTPUT"], "w") as f:
    json.dump(seen, f)
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with script_stack(
        tmp_path_factory.mktemp("script-stops-logs"),
        cancel_grace_s=GRACE_S,
        timeout_grace_s=GRACE_S,
        preempt_grace_s=5.0,
        preempt_after_s=1.0,
        preempt_min_run_s=1.0,
        min_billed_s=0.1,
    ) as started:
        yield started


@pytest.fixture(scope="module")
def code(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> str:
    files = {"stops.py": STOPS, "checkpointed.py": CHECKPOINTED}
    return upload(stack, tmp_path_factory.mktemp("stops"), files)


def started_tree(stack: Stack, code: str, mode: str, duration_s: float = 60) -> tuple[str, str]:
    """Submit the stops script; once it runs, its task id and token (its three processes seen
    on the host: the script, its child, its daemon)."""
    token = f"tree-{secrets.token_hex(6)}"
    task_id = run_script(stack, code, ["python", "stops.py", token, mode], duration_s=duration_s)
    logged(stack, task_id, "ready")
    wait_for(lambda: len(host_processes(f"{token}\0child")) == 1, 10, "the script's child")
    wait_for(lambda: len(host_processes(f"{token}\0daemon")) == 1, 10, "the script's daemon")
    return task_id, token


def nothing_left(token: str) -> None:
    wait_for(lambda: not host_processes(token), 10, f"no process with {token} left")


def cancel(stack: Stack, task_id: str) -> float:
    reply = httpx.delete(
        f"{stack.url}/tasks/{task_id}", headers={"X-API-Key": DEMO_KEY}, timeout=10
    )
    assert reply.status_code == 202, reply.text
    return time.monotonic()


def test_a_cancel_sends_sigterm_to_the_whole_tree(stack: Stack, code: str) -> None:
    task_id, token = started_tree(stack, code, "term")
    cancel(stack, task_id)
    done = ended(stack, task_id)
    assert (done["status"], done["error_kind"]) == ("REVOKED", "cancelled"), done["error"]
    assert "got SIGTERM" in log_text(stack, task_id)
    nothing_left(token)


def test_a_script_that_ignores_sigterm_is_killed_after_the_grace(stack: Stack, code: str) -> None:
    task_id, token = started_tree(stack, code, "ignore")
    asked = cancel(stack, task_id)
    logged(stack, task_id, "got SIGTERM", timeout=GRACE_S + 10)  # it had the ask, and went on
    done = ended(stack, task_id)
    took = time.monotonic() - asked
    assert done["status"] == "REVOKED"
    assert took >= GRACE_S * 0.9, f"ended {took:.2f} s after the cancel: before the grace"
    nothing_left(token)  # the SIGKILL took the whole tree, the daemon that ignored it too


def test_a_script_past_its_duration_is_stopped_as_a_timeout(stack: Stack, code: str) -> None:
    task_id, token = started_tree(stack, code, "term", duration_s=3)
    done = ended(stack, task_id, timeout=60)
    assert (done["status"], done["error_kind"]) == ("FAILURE", "timeout"), done["error"]
    assert "got SIGTERM" in log_text(stack, task_id)
    nothing_left(token)


def test_a_preempted_script_resumes_from_its_checkpoint_and_is_billed_once(
    stack: Stack, code: str
) -> None:
    command = ["python", "checkpointed.py", str(STEPS)]
    ours = run_script(stack, code, command, duration_s=40, preemptible=True)
    logged(stack, ours, "run 1 from step 0")
    owed = submit(stack, OTHER_KEY, duration_s=0.3)
    theirs = ended(stack, owed, OTHER_KEY)
    assert theirs["status"] == "SUCCESS"

    done = ended(stack, ours, timeout=120)
    assert (done["status"], done["preemptions"], done["runs"]) == ("SUCCESS", 1, 2), done["error"]
    seen = done["result"]["output"]
    assert (seen["done"], seen["runs"], seen["preemptible"]) == (STEPS, 2, "1")
    assert 0 < seen["resumed_at"] < STEPS  # it went on from its checkpoint, not from 0
    log = log_text(stack, ours)
    assert "checkpointed at step" in log and f"run 2 from step {seen['resumed_at']}" in log
    # the owed job ran while ours waited: after ours started, before it ended
    assert float(theirs["result"]["finished_at"]) < float(done["result"]["started_at"])
    mine = [b for b in bills(stack, DEMO_KEY) if b["task_id"] == ours]
    assert len(mine) == 1 and "over 2 runs" in str(mine[0]["description"])
    assert float(mine[0]["gpu_seconds"]) >= STEPS * 0.05  # type: ignore[arg-type]
    assert job(stack, ours)["ran_s"] == pytest.approx(mine[0]["gpu_seconds"], abs=0.002)
