"""The warm child: real spawned processes running the job types of tests.jobs.sample."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.dev.processes import wait_until
from app.jobs import MAX_OUTPUT_BYTES
from app.worker.calls import Call, ChildStartError, Ended
from app.worker.child import JobChild
from app.worker.live import LogLine, Stream

pytestmark = pytest.mark.integration

MODULES = ["tests.jobs.sample"]
GRACE_S = 0.5


def never() -> bool:
    return False


def after_polls(polls: int) -> Callable[[], bool]:
    """A should_stop that turns true on its polls-th call: the job has been running a while."""
    seen = 0

    def should_stop() -> bool:
        nonlocal seen
        seen += 1
        return seen >= polls

    return should_stop


class Heard:
    """A JobEvents that keeps what it is told."""

    def __init__(self) -> None:
        self.said: list[LogLine] = []
        self.reported: list[tuple[float, str]] = []
        self.begun = 0

    def began(self) -> None:
        self.begun += 1

    def lines(self, batch: list[LogLine]) -> None:
        self.said += batch

    def progress(self, fraction: float, message: str) -> None:
        self.reported.append((fraction, message))

    def texts(self, stream: Stream) -> list[str]:
        return [line.text for line in self.said if line.stream == stream]


def files(folder: Path | None) -> list[str]:
    assert folder is not None
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def call(type_: str, inp: dict[str, Any] | None = None, budget_s: float = 10) -> Call:
    return Call("t1", type_, json.dumps(inp or {}), budget_s, None)


@pytest.fixture
def make_child() -> Iterator[Callable[..., JobChild]]:
    children: list[JobChild] = []

    def make(**graces: float) -> JobChild:
        options = {"timeout_grace_s": GRACE_S, "cancel_grace_s": GRACE_S, "kill_grace_s": GRACE_S}
        child = JobChild(MODULES, None, **{**options, **graces})
        children.append(child)
        child.start()
        return child

    yield make
    for child in children:
        child.close()


@pytest.fixture
def child(make_child: Callable[..., JobChild]) -> JobChild:
    """A child of the test's own, for tests that take one down."""
    return make_child()


@pytest.fixture(scope="module")
def shared() -> Iterator[JobChild]:
    """One child for the tests that leave it as it was: a spawn costs about half a second."""
    child = JobChild(MODULES, None, timeout_grace_s=GRACE_S, cancel_grace_s=GRACE_S)
    child.start()
    yield child
    child.close()


def counted(child: JobChild) -> dict[str, int]:
    ended = child.run(call("counted"), never)
    assert ended.end == "success", ended.error
    assert ended.output is not None
    out: dict[str, int] = json.loads(ended.output)
    return out


def test_echo_returns_its_output(shared: JobChild) -> None:
    ended = shared.run(call("echo", {"text": "hi"}), never)
    assert ended.end == "success", ended.error
    assert json.loads(ended.output or "") == {"upper": "HI"}
    assert ended.error is None
    assert ended.seconds > 0
    assert ended.peak_rss_bytes is not None and ended.peak_rss_bytes > 0
    assert ended.peak_gpu_memory_bytes is None  # no CUDA here


def test_a_builtin_class_type_runs_in_the_child(shared: JobChild) -> None:
    silence = base64.b64encode(bytes(32_000)).decode()  # 1 s of 16 kHz 16-bit zeros
    ended = shared.run(call("vad", {"audio": silence}), never)
    assert ended.end == "success", ended.error
    assert json.loads(ended.output or "") == {"segments": [], "speech_ratio": 0.0, "chunks": 32}


def test_setup_runs_once_per_child(child: JobChild) -> None:
    seen = [counted(child) for _ in range(3)]
    assert seen == [{"setups": 1, "pid": child.pid}] * 3


def test_only_a_job_that_began_late_says_when_it_began(
    make_child: Callable[..., JobChild],
) -> None:
    # the runner rewrites started_at then: after setup() ran, or after a fresh child's start
    child = make_child()
    told = [Heard() for _ in range(3)]
    for heard in told[:2]:
        assert child.run(call("counted"), never, heard).end == "success"
    child.close()  # the next run waits for a fresh child
    assert child.run(call("echo", {"text": "x"}), never, told[2]).end == "success"
    assert [heard.begun for heard in told] == [1, 0, 1]


def test_a_failed_setup_ends_setup_and_is_tried_again(child: JobChild) -> None:
    first = child.run(call("shaky"), never)
    assert first.end == "setup"
    assert "shaky: the first setup fails" in (first.error or "")
    second = child.run(call("shaky"), never)
    assert second.end == "success", second.error
    assert json.loads(second.output or "") == {"setups": 2, "pid": child.pid}


def test_what_a_job_says_arrives_in_order_by_stream_and_its_files_stay(shared: JobChild) -> None:
    heard = Heard()
    ended = shared.run(call("chatty", {"lines": 5, "files": 3}), never, heard)
    assert ended.end == "success", ended.error
    assert heard.texts("log") == [f"log {n}" for n in range(5)]
    assert heard.texts("stdout") == [f"out {n}" for n in range(5)]
    assert heard.texts("stderr") == [f"err {n}" for n in range(5)]
    assert heard.reported[-1] == (1.0, "line 5 of 5")
    fractions = [fraction for fraction, _ in heard.reported]
    assert fractions == sorted(fractions)
    assert files(ended.output_dir) == ["file-0.txt", "file-2.txt", "sub/file-1.txt"]
    # the next job has a folder of its own, empty, and hears nothing of this one
    again = Heard()
    echoed = shared.run(call("echo", {"text": "quiet"}), never, again)
    assert echoed.output_dir not in (None, ended.output_dir)
    assert files(echoed.output_dir) == []
    assert again.said == []


@pytest.mark.parametrize(("how", "death"), [("exit", "exit code 3"), ("segv", "SIGSEGV")])
def test_a_crash_fails_the_job_and_a_fresh_child_serves_the_next(
    child: JobChild, how: str, death: str
) -> None:
    first = counted(child)
    heard = Heard()
    ended = child.run(call("crash", {"how": how}), never, heard)
    assert ended.end == "crashed"
    assert ended.error is not None
    assert death in ended.error
    assert "crash: about to go" in ended.error
    assert heard.texts("stdout") == ["crash: about to go"]  # its last words are its log too
    if how == "segv":
        assert any("Segmentation fault" in text for text in heard.texts("stderr"))
    after = counted(child)
    assert after["pid"] != first["pid"]
    assert after == {"setups": 1, "pid": child.pid}


def test_an_exception_ends_the_job_with_its_traceback(shared: JobChild) -> None:
    pid = shared.pid
    heard = Heard()
    ended = shared.run(call("fail"), never, heard)
    assert heard.texts("stdout") == ["fail: about to raise"]
    assert ended.end == "exception"
    assert ended.error is not None
    assert ended.error.startswith("ValueError: the job failed on purpose\nin the job's code:")
    assert 'File "tests/jobs/sample.py"' in ended.error  # its own frames, not fairgpu's
    assert "job_process.py" in (ended.trace or "")  # the whole traceback, for the worker's log
    assert shared.pid == pid  # an exception costs no child


def test_past_budget_and_grace_is_a_timeout(child: JobChild) -> None:
    pid = child.pid
    ended = child.run(call("sleepy", {"seconds": 30}, budget_s=GRACE_S), never)
    assert ended.end == "timeout"
    assert "budget" in (ended.error or "")
    assert child.pid not in (None, pid)
    assert child.run(call("echo", {"text": "next"}), never).end == "success"


@pytest.mark.parametrize("job", ["sleepy", "polite"])
def test_a_job_that_ends_within_the_grace_is_a_timeout_and_its_output_is_not_kept(
    make_child: Callable[..., JobChild], job: str
) -> None:
    # sleepy returns after its budget, polite stops when its budget's end asks it to (it sees
    # ctx.cancelled); neither is killed (a kill would take a minute: this test would time out)
    child = make_child(timeout_grace_s=60)
    pid = child.pid
    ended = child.run(call(job, {"seconds": 1.5}, budget_s=0.2), never)
    assert (ended.end, ended.output) == ("timeout", None)
    assert "ran past its budget of 0.2 s" in (ended.error or "")
    assert "killed" not in (ended.error or "")
    assert ended.seconds > 0.2
    assert child.pid == pid  # it stopped by itself: no kill


def test_a_polite_job_stops_at_its_cancel_without_a_kill(
    make_child: Callable[..., JobChild],
) -> None:
    child = make_child(cancel_grace_s=60)  # a kill would take a minute: this test would time out
    pid = child.pid
    ended = child.run(call("polite", {"seconds": 30}), after_polls(3))
    assert ended.end == "cancelled"
    assert "killed" not in (ended.error or "")
    assert child.pid == pid


def test_a_job_that_ignores_its_cancel_is_killed_after_the_grace(child: JobChild) -> None:
    pid = child.pid
    ended = child.run(call("sleepy", {"seconds": 30}), after_polls(3))
    assert ended.end == "cancelled"
    assert "killed" in (ended.error or "")
    assert child.pid not in (None, pid)
    assert child.run(call("echo", {"text": "next"}), never).end == "success"


def test_output_over_the_limit_is_an_exception(shared: JobChild) -> None:
    ended = shared.run(call("huge"), never)
    assert ended.end == "exception"
    assert ended.output is None
    assert str(MAX_OUTPUT_BYTES) in (ended.error or "")


@pytest.mark.parametrize(
    ("job", "inp", "says"),
    [
        ("no-such-type", {}, "unknown job type 'no-such-type'"),
        ("echo", {"text": 3}, "validation error"),
        ("needs-extra", {}, "fairgpu_no_such_package"),
    ],
)
def test_a_job_that_cannot_run_is_an_exception(
    shared: JobChild, job: str, inp: dict[str, Any], says: str
) -> None:
    ended: Ended = shared.run(call(job, inp), never)
    assert ended.end == "exception"
    assert says in (ended.error or "")


def test_a_module_that_does_not_import_stops_the_start() -> None:
    child = JobChild(
        ["tests.jobs.no_such_module"], None, timeout_grace_s=GRACE_S, cancel_grace_s=GRACE_S
    )
    try:
        with pytest.raises(ChildStartError, match=r"tests\.jobs\.no_such_module"):
            child.start()
        assert child.pid is None
    finally:
        child.close()


def test_close_stops_the_child(child: JobChild) -> None:
    child.close()
    assert child.pid is None
    child.close()  # idempotent


# A worker that starts a child and runs a job that ignores cancels; it prints the child's pid
# once the call is in the pipe (the child runs the job even if the worker is gone by then).
ORPHANING_WORKER = """
from app.worker.calls import Call
from app.worker.child import JobChild
child = JobChild(["tests.jobs.sample"], None, timeout_grace_s=60, cancel_grace_s=60)
child.start()
told = []
def should_stop():
    if not told:
        told.append(print(child.pid, flush=True))
    return False
child.run(Call("t1", "sleepy", '{"seconds": 60}', 60, None), should_stop)
"""


def gone(pid: int) -> bool:
    """Whether the process has exited (a zombie waiting for a reaper counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_worker_killed_outright_takes_its_child_with_it(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "-c", ORPHANING_WORKER]
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where the child keeps its log
    with subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE) as worker:
        try:
            assert worker.stdout is not None
            pid = int(worker.stdout.readline())
            worker.send_signal(signal.SIGKILL)
            wait_until(lambda: gone(pid), timeout=10, what="the orphaned child's exit")
            assert list(tmp_path.iterdir()) == []  # and it removed its log
        finally:
            worker.kill()
