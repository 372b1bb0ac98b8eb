"""`fairgpu run` as a researcher runs it: the installed command, started as a process in a project
folder, against a stack of real processes (the API, a worker running script jobs in its
sandbox). The script's log comes through, its exit code is the command's, its artifacts come
down with --download, the same folder run again is not uploaded again, and Ctrl-C asks on a
terminal whether to cancel the job (yes cancels it, anything else leaves it running) and leaves
it running without one (exit 130 each time)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import httpx
import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import DEMO_KEY, ended, job, script_stack, wait_for
from tests.support import child_environment

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
FAIRGPU = Path(sys.executable).with_name("fairgpu")  # the console script, as installed
#: The project's script: it logs, reports progress, leaves an artifact, writes its output and
#: exits with the code it is given.
MAIN = """\
import json, os, sys
print("hello from the project", flush=True)
print("fairgpu:progress 0.5 half way", flush=True)
with open(os.path.join(os.environ["FAIRGPU_ARTIFACTS_DIR"], "metrics.txt"), "w") as f:
    f.write("loss 0.25\\n")
with open(os.environ["FAIRGPU_OUTPUT"], "w") as f:
    json.dump({"args": sys.argv[1:], "greeting": os.environ.get("GREETING")}, f)
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""
#: A script that runs until it is stopped, saying when it has begun.
WAITS = "import time\nprint('waiting', flush=True)\nwhile True:\n    time.sleep(0.2)\n"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with script_stack(tmp_path_factory.mktemp("fairgpu-run-logs"), min_billed_s=0.1) as started:
        yield started


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "my-project"
    folder.mkdir()
    (folder / "main.py").write_text(MAIN)
    (folder / "waits.py").write_text(WAITS)
    (folder / ".env").write_text("SECRET=never-sent\n")
    (folder / ".gitignore").write_text("data/\n")
    (folder / "data").mkdir()
    (folder / "data" / "big.bin").write_bytes(os.urandom(4096))
    return folder


def environment(stack: Stack) -> dict[str, str]:
    return {
        **child_environment(),
        "FAIRGPU_URL": stack.url,
        "FAIRGPU_API_KEY": DEMO_KEY,
        "COLUMNS": "200",
    }


def submitted(said: str) -> str:
    """The task id that `fairgpu run` said it submitted (in bold on a terminal)."""
    found = re.search(r"Submitted \S*?([0-9a-f-]{36})", said)
    assert found is not None, said
    return found[1]


def fairgpu_run(stack: Stack, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`fairgpu run ARGS` in folder, to its end, with no terminal."""
    return subprocess.run(
        [str(FAIRGPU), "run", *args],
        cwd=folder,
        env=environment(stack),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_the_log_and_the_exit_code_come_through_and_a_second_run_sends_nothing_again(
    stack: Stack, project: Path, tmp_path: Path
) -> None:
    first = fairgpu_run(
        stack, project, "--env", "EXIT_WITH=3", "--", "python", "main.py", "--lr", "0.1"
    )
    said = first.stdout
    assert first.returncode == 3, said + first.stderr
    assert ".env: an env file, left out" in said
    assert "1 path left out by .gitignore" in said
    assert "uploading it" in said
    assert "hello from the project" in said
    assert "progress 50%  half way" in said
    table = " ".join(said.split())  # the result's rows, whatever their padding
    assert "status FAILURE exit code 3" in table
    assert "cost " in table

    out = tmp_path / "out"
    second = fairgpu_run(
        stack,
        project,
        "--env",
        "GREETING=hi",
        "--download",
        str(out),
        "--",
        "python",
        "main.py",
        "-v",
    )
    said = second.stdout
    assert second.returncode == 0, said + second.stderr
    assert "the server has it already, not sent again" in said
    assert "uploading" not in said
    table = " ".join(said.split())
    assert 'output {"args": ["-v"], "greeting": "hi"}' in table
    assert "environment cached" in table
    assert "metrics.txt" in said
    assert (out / "metrics.txt").read_text() == "loss 0.25\n"


def test_a_command_given_inline_passes_its_exit_code(stack: Stack, project: Path) -> None:
    done = fairgpu_run(stack, project, "--", "python", "-c", "import sys; print('hi'); sys.exit(7)")
    assert done.returncode == 7, done.stdout + done.stderr
    assert "hi" in done.stdout


def test_ctrl_c_without_a_terminal_leaves_the_job_running_and_exits_130(
    stack: Stack, project: Path, tmp_path: Path
) -> None:
    printed = tmp_path / "printed.txt"
    with printed.open("w") as sink:
        command = subprocess.Popen(
            [str(FAIRGPU), "run", "--", "python", "waits.py"],
            cwd=project,
            env=environment(stack),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        wait_for(lambda: "waiting" in printed.read_text() or None, 120, "the script's first line")
        task_id = submitted(printed.read_text())
        command.send_signal(signal.SIGINT)
        assert command.wait(timeout=30) == 130
        said = printed.read_text()
        assert f"the job goes on. Follow it: fairgpu watch {task_id}" in said
        assert job(stack, task_id)["status"] == "STARTED"
    finally:
        if command.poll() is None:
            command.kill()
    stopped = httpx.delete(
        f"{stack.url}/tasks/{task_id}", headers={"X-API-Key": DEMO_KEY}, timeout=10
    )
    assert stopped.status_code == 202, stopped.text
    assert ended(stack, task_id)["status"] == "REVOKED"


class Terminal:
    """`fairgpu run ARGS` on a pseudo-terminal of its own, as a person at a terminal runs it."""

    def __init__(self, stack: Stack, folder: Path, *args: str) -> None:
        self.main, child = pty.openpty()
        env = {**environment(stack), "TERM": "xterm"}
        self.process = subprocess.Popen(
            [str(FAIRGPU), "run", *args],
            cwd=folder,
            env=env,
            stdin=child,
            stdout=child,
            stderr=child,
        )
        os.close(child)
        self.seen = b""

    def shows(self, words: str, timeout: float = 120) -> str:
        """Read what it prints until `words` is among it; all it has printed."""

        def found() -> bool | None:
            ready, _, _ = select.select([self.main], [], [], 0.2)
            if ready:
                with suppress(OSError):  # EIO once the command has ended
                    self.seen += os.read(self.main, 65536)
            return words.encode() in self.seen or None

        wait_for(found, timeout, f"{words!r} on the terminal")
        return self.seen.decode(errors="replace")

    def type(self, text: str) -> None:
        os.write(self.main, text.encode())

    def ended(self) -> int:
        code = self.process.wait(timeout=60)
        with suppress(OSError):
            while select.select([self.main], [], [], 0.2)[0]:
                chunk = os.read(self.main, 65536)
                if not chunk:
                    break
                self.seen += chunk
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        os.close(self.main)


@pytest.mark.parametrize("answer", ["y", ""])
def test_ctrl_c_on_a_terminal_asks_and_only_a_yes_cancels(
    stack: Stack, project: Path, answer: str
) -> None:
    terminal = Terminal(stack, project, "--", "python", "waits.py")
    try:
        said = terminal.shows("waiting")
        task_id = submitted(said)
        terminal.process.send_signal(signal.SIGINT)
        terminal.shows("cancel the job? [y/N]")
        terminal.type(answer + "\n")
        assert terminal.ended() == 130
        said = terminal.seen.decode(errors="replace")
    finally:
        terminal.close()
    if answer == "y":
        assert "to stop: it gets SIGTERM" in said
        assert "REVOKED" in said  # followed to its end, and its result shown
        assert ended(stack, task_id)["status"] == "REVOKED"
        return
    assert "the job goes on" in said
    assert job(stack, task_id)["status"] == "STARTED"
    stopped = httpx.delete(
        f"{stack.url}/tasks/{task_id}", headers={"X-API-Key": DEMO_KEY}, timeout=10
    )
    assert stopped.status_code == 202, stopped.text
    assert ended(stack, task_id)["status"] == "REVOKED"
