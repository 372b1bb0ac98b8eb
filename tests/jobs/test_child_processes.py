"""Every process a job starts ends with its run, however it detached: a daemon (a double fork
into a session of its own) that keeps writing to a file is gone once the job has returned, once
its child was killed for overrunning, and once its child crashed. Real spawned children."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.dev.processes import wait_until
from app.worker.child import JobChild
from tests.jobs.test_child import GRACE_S, MODULES, Heard, call, never

pytestmark = pytest.mark.integration


@pytest.fixture
def child() -> Iterator[JobChild]:
    graces = {"timeout_grace_s": GRACE_S, "cancel_grace_s": GRACE_S, "kill_grace_s": GRACE_S}
    made = JobChild(MODULES, None, **graces)
    made.start()
    yield made
    made.close()


def gone(pid: int) -> bool:
    """Whether the process no longer exists at all (not even as a zombie to reap)."""
    return not Path(f"/proc/{pid}").exists()


def assert_gone_and_silent(pid: int, written: Path) -> None:
    """The daemon is gone, and its file (which it had written to) grows no more."""
    wait_until(lambda: gone(pid), timeout=10, what=f"the end of the job's daemon {pid}")
    size = written.stat().st_size
    assert size > 0  # it ran, and wrote
    assert written.stat().st_size == size  # and writes no more


def daemon_pid(heard: Heard) -> int:
    """The daemon's pid, as the job printed it."""
    [said] = [text for text in heard.texts("stdout") if text.startswith("detached ")]
    return int(said.removeprefix("detached "))


def test_a_daemon_a_job_started_is_gone_once_the_job_returns(
    child: JobChild, tmp_path: Path
) -> None:
    written = tmp_path / "daemon.log"
    ended = child.run(call("detacher", {"path": str(written)}), never)
    assert ended.end == "success", ended.error
    assert_gone_and_silent(json.loads(ended.output or "")["pid"], written)
    assert child.run(call("echo", {"text": "next"}), never).end == "success"  # it serves on


def test_a_daemon_is_gone_once_its_overrunning_job_is_killed(
    child: JobChild, tmp_path: Path
) -> None:
    written, heard = tmp_path / "daemon.log", Heard()
    detach = {"path": str(written), "then": "hang"}
    ended = child.run(call("detacher", detach, budget_s=0.2), never, heard)
    assert ended.end == "timeout" and "killed" in (ended.error or ""), ended.error
    assert_gone_and_silent(daemon_pid(heard), written)


def test_a_daemon_is_gone_once_its_job_took_the_child_down(child: JobChild, tmp_path: Path) -> None:
    written, heard = tmp_path / "daemon.log", Heard()
    ended = child.run(call("detacher", {"path": str(written), "then": "exit"}), never, heard)
    assert ended.end == "crashed", ended.error
    assert_gone_and_silent(daemon_pid(heard), written)


# A worker that runs a job leaving a daemon behind and prints the daemon's pid (from the job's
# stdout, as the worker hears it), then waits on the job, which hangs.
DAEMON_WORKER = """
import sys
from app.worker.calls import Call
from app.worker.child import JobChild


class Say:
    def began(self):
        pass

    def lines(self, batch):
        for line in batch:
            if line.text.startswith("detached "):
                print(line.text.removeprefix("detached "), flush=True)

    def progress(self, fraction, message):
        pass


child = JobChild(["tests.jobs.sample"], None, timeout_grace_s=60, cancel_grace_s=60)
child.start()
inp = '{"path": "%s", "then": "hang"}' % sys.argv[1]
child.run(Call("t1", "detacher", inp, 60, None), lambda: False, Say())
"""


def dead(pid: int) -> bool:
    """Whether the process has exited (a zombie left for init to reap counts)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_daemon_is_gone_once_its_worker_was_killed_outright(tmp_path: Path) -> None:
    written = tmp_path / "daemon.log"
    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "-c", DAEMON_WORKER, str(written)]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    with subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE) as worker:
        try:
            assert worker.stdout is not None
            pid = int(worker.stdout.readline())
            worker.send_signal(signal.SIGKILL)  # its child ends the job's processes, then itself
            wait_until(lambda: dead(pid), timeout=20, what=f"the end of the job's daemon {pid}")
            size = written.stat().st_size
            assert size > 0 and written.stat().st_size == size
        finally:
            worker.kill()
