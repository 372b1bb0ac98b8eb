"""The dev stack's supervisor, on real (tiny) processes: what dies is started again with one
log line, what the stack removed is not, and Redis's state changes are one line each."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from app.dev.supervisor import Backoff, RedisWatch, Slot, Supervisor, exit_reason
from tests.support import wait_for

SLEEPER = [sys.executable, "-c", "import signal; signal.pause()"]
#: A tenth of the stack's pace (TICK_S, Backoff.first_s): the same steps, without the waits.
TICK_S = 0.025
FIRST_S = 0.05


class Sleepers:
    """Processes that wait for a signal, by name, as a stack holds its workers."""

    def __init__(self) -> None:
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.lock = threading.RLock()

    def start(self, name: str) -> None:
        with self.lock:
            self.processes[name] = subprocess.Popen(SLEEPER)

    def slots(self) -> list[Slot]:
        return [
            Slot(name, process.poll, lambda name=name: self.start(name))
            for name, process in self.processes.items()
        ]

    def close(self) -> None:
        for process in self.processes.values():
            process.kill()
            process.wait()


@pytest.fixture
def sleepers() -> Iterator[Sleepers]:
    made = Sleepers()
    yield made
    made.close()


def supervise(sleepers: Sleepers, ping: bool = True) -> Supervisor:
    supervisor = Supervisor(
        sleepers.slots,
        RedisWatch("redis://x"),
        lambda: ping,
        sleepers.lock,
        tick_s=TICK_S,
        backoff=lambda: Backoff(first_s=FIRST_S),
    )
    supervisor.start()
    return supervisor


def test_a_process_that_dies_is_started_again_with_one_line(
    sleepers: Sleepers, caplog: pytest.LogCaptureFixture
) -> None:
    sleepers.start("worker a")
    first = sleepers.processes["worker a"]
    supervisor = supervise(sleepers)
    try:
        first.kill()
        wait_for(lambda: sleepers.processes["worker a"] is not first, what="a restart")
    finally:
        supervisor.stop()
    assert sleepers.processes["worker a"].poll() is None
    [record] = caplog.records
    said = f"worker a exited (killed by SIGKILL); restarting it in {FIRST_S:g} s"
    assert record.getMessage() == said


def test_a_process_the_stack_removed_is_not_started_again(sleepers: Sleepers) -> None:
    sleepers.start("worker a")
    supervisor = supervise(sleepers)
    try:
        with sleepers.lock:
            gone = sleepers.processes.pop("worker a")
        gone.kill()
        gone.wait()
        sleepers.start("worker b")  # a tick that sees b has passed over a as well
        b = sleepers.processes["worker b"]
        b.kill()
        wait_for(lambda: sleepers.processes["worker b"] is not b, what="b's restart")
    finally:
        supervisor.stop()
    assert set(sleepers.processes) == {"worker b"}


def test_nothing_is_started_again_once_the_supervisor_stopped(sleepers: Sleepers) -> None:
    sleepers.start("worker a")
    first = sleepers.processes["worker a"]
    supervise(sleepers).stop()
    first.kill()
    first.wait()
    assert sleepers.processes["worker a"] is first


def test_redis_down_and_back_are_one_line_each(caplog: pytest.LogCaptureFixture) -> None:
    watch = RedisWatch("redis://127.0.0.1:6379/0")
    watch.up()
    for _ in range(3):
        watch.down("Error 111 connecting\nto 127.0.0.1:6379.   Connection refused.")
    watch.up()
    watch.up()
    assert [r.getMessage() for r in caplog.records] == [
        "Redis down: Error 111 connecting to 127.0.0.1:6379. Connection refused.",
        "Redis back: redis://127.0.0.1:6379/0 answers again",
    ]


def test_a_redis_that_does_not_answer_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    answers = threading.Event()
    pings = []

    def ping() -> bool:
        pings.append(answers.is_set())
        return answers.is_set()

    watch = RedisWatch("redis://db:6379/0")
    supervisor = Supervisor(list, watch, ping, threading.RLock(), tick_s=TICK_S)
    supervisor.start()
    try:
        wait_for(lambda: len(pings) >= 3, what="three pings")
        answers.set()
        wait_for(lambda: not watch.is_down, what="Redis back")
    finally:
        supervisor.stop()
    assert [r.getMessage() for r in caplog.records] == [
        "Redis down: redis://db:6379/0 does not answer; waiting for it",
        "Redis back: redis://db:6379/0 answers again",
    ]


def test_exit_reasons_read_well() -> None:
    assert exit_reason(1) == "exit code 1"
    assert exit_reason(-signal.SIGKILL) == "killed by SIGKILL"
    assert exit_reason(-200) == "killed by signal 200"
