"""What a job says and leaves, through the `fairgpu` command against the real API (served by
uvicorn in a thread on the suite's Redis): `logs [--tail] [--follow]`, `artifacts [--download]`,
and the progress and log lines of `watch` and `status`.

The worker stand-in writes the reports through the real store (JobRecorder.log, .progress and
.finish with artifacts), and the artifacts' files into the API's local store, so every state is
reached without a worker process. A command that must run while the job goes on is a real
`fairgpu` process, read as it prints.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.artifacts import LocalArtifacts
from app.client.artifacts import local_path
from app.client.logs import LogCut
from app.models import LogLine, Status
from app.settings import Settings
from tests.api.helpers import OWNER, USERS_FILE, Worker
from tests.client import test_client_cli as served
from tests.client.test_client_cli import DEMO, as_json, fairgpu, ok, submit
from tests.client.test_client_job_types import row
from tests.support import wait_for

server = served.server
url = served.url
worker = served.worker
ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 30.0


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return Settings(
        redis_url=redis_url, users_file=USERS_FILE, artifacts_dir=tmp_path / "artifacts"
    )


@dataclass
class Running:
    """A job that the worker stand-in has started, and its reports."""

    worker: Worker
    task_id: str
    token: str
    clock: float = field(default_factory=time.time)

    def say(self, *lines: tuple[str, str], dropped: int = 0) -> None:
        """Log (stream, text) lines, and a log event of them, as the worker's reports do."""
        self.clock += 0.001  # one poll's lines share a time
        batch = [(self.clock, stream, text) for stream, text in lines]
        assert self.worker.recorder.log(
            self.task_id, self.token, batch, event=batch, dropped=dropped
        )

    def progress(self, fraction: float, message: str) -> None:
        assert self.worker.recorder.progress(self.task_id, self.token, fraction, message)

    def succeed(self, artifacts: list[dict[str, object]] | None = None) -> None:
        assert self.worker.recorder.finish(
            self.task_id,
            self.token,
            Status.SUCCESS,
            charge=None,
            owner=OWNER,
            output="{}",
            artifacts=None if artifacts is None else json.dumps(artifacts),
        )

    def fail(self, error: str) -> None:
        assert self.worker.recorder.finish(
            self.task_id, self.token, Status.FAILURE, charge=None, owner=OWNER, error=error
        )


@pytest.fixture
def running(url: str, worker: Worker) -> Running:
    task_id = submit(url)
    token = worker.lease()
    worker.start(task_id, token)
    return Running(worker, task_id, token)


def store_file(settings: Settings, task_id: str, name: str, content: bytes) -> dict[str, object]:
    """Put a file among the job's artifacts; its listing, as a SUCCESS records it."""
    assert settings.artifacts_dir is not None
    source = settings.artifacts_dir.parent / "source"
    source.write_bytes(content)
    with source.open("rb") as file:
        LocalArtifacts(settings.artifacts_dir).put(task_id, name, file)
    return {"name": name, "size": len(content), "sha256": hashlib.sha256(content).hexdigest()}


class Command:
    """`fairgpu ARGS` in a process of its own, its output read as it comes."""

    def __init__(self, url: str, *args: str, env: dict[str, str] | None = None) -> None:
        command = [sys.executable, "-m", "app.client.cli", *args, "--url", url, "--key", DEMO]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRGPU_")}
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**clean, "COLUMNS": "120", **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._out = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := os.read(self.process.stdout.fileno(), 65536):  # what is there, as read1
            self._out += chunk

    @property
    def out(self) -> str:
        return self._out.decode(errors="replace")

    def shows(self, *texts: str) -> None:
        """Wait until the output has every text (the command is still running)."""
        wait_for(lambda: all(t in self.out for t in texts), WAIT_S, f"{texts} in {self.out!r}")

    def ended(self) -> tuple[int, str, str]:
        """Its exit code, stdout and stderr, once it has exited."""
        code = self.process.wait(WAIT_S)
        self._reader.join(WAIT_S)
        assert self.process.stderr is not None
        return code, self.out, self.process.stderr.read().decode()

    def stop(self) -> None:
        """Kill it if it still runs, and close its pipes."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(WAIT_S)
        self._reader.join(WAIT_S)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def commands() -> Iterator[list[Command]]:
    started: list[Command] = []
    yield started
    for command in started:
        command.stop()


def texts(out: str) -> list[str]:
    """The log lines of `logs`' output, without their clock time: "out hello"."""
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.strip()]


# -- logs -----------------------------------------------------------------------------------------
def test_logs_prints_the_kept_lines_stderr_marked_and_the_last_ones_with_tail(
    url: str, running: Running
) -> None:
    running.say(("stdout", "loading"), ("stderr", "warning: slow disk"))
    running.say(("log", "epoch 1"), ("stdout", "\x1b[31mred\x1b[0m"))

    out = ok(fairgpu(url, "logs", running.task_id))
    red = "out �[31mred�[0m"  # escape sequences a job printed never reach the terminal...
    assert texts(out) == ["out loading", "err warning: slow disk", "log epoch 1", red]
    # ...but reach a script whole
    given = ok(fairgpu(url, "logs", running.task_id, "--json"))
    lines = [json.loads(line) for line in given.splitlines()]
    assert [(x["stream"], x["text"]) for x in lines][-1] == ("stdout", "\x1b[31mred\x1b[0m")
    assert texts(ok(fairgpu(url, "logs", running.task_id, "--tail", "2"))) == ["log epoch 1", red]
    assert ok(fairgpu(url, "logs", submit(url))) == ""  # a job that said nothing


def test_logs_follow_prints_every_line_once_until_the_job_ends(
    url: str, running: Running, commands: list[Command]
) -> None:
    running.say(("stdout", "one"), ("stdout", "one"))  # the same line twice is two lines
    running.say(("stderr", "two"))
    follow = Command(url, "logs", running.task_id, "--follow")
    commands.append(follow)
    follow.shows("err two")  # the kept lines, then the stream's replay of them: not printed again

    running.say(("stdout", "three"))
    running.say(("log", "four"), dropped=3)
    follow.shows("log four")
    running.succeed()

    code, out, err = follow.ended()
    assert code == 0, err
    assert texts(out) == ["out one", "out one", "err two", "out three", "log four"]
    assert f"3 log lines were left out here (fairgpu logs {running.task_id} has them)" in err


def test_logs_follow_of_an_ended_job_prints_its_lines_and_exits_3_if_it_failed(
    url: str, running: Running
) -> None:
    running.say(("stdout", "before the end"))
    running.fail("out of memory")

    result = fairgpu(url, "logs", running.task_id, "--follow", "--tail", "1")
    assert result.exit_code == 3, result.output
    assert texts(result.stdout) == ["out before the end"]
    assert result.stderr == "fairgpu: the job ended FAILURE: out of memory\n"


def test_logs_follow_after_a_tail_goes_on_from_the_tail() -> None:
    line = LogLine(at=10.0, stream="stdout", text="x")
    older = LogLine(at=9.0, stream="stdout", text="old")
    cut = LogCut([line, line])
    # the replay: an older line left out by --tail, the two shown, then two new ones
    new = LogLine(at=10.0, stream="stderr", text="x")
    later = LogLine(at=11.0, stream="stdout", text="x")
    assert list(cut.new([older, line, line, new, later, line])) == [new, later, line]
    assert list(LogCut([]).new([older, line])) == [older, line]


# -- watch and status -----------------------------------------------------------------------------
def test_watch_shows_progress_and_log_lines_then_the_result(url: str, running: Running) -> None:
    running.progress(0.25, "loading")
    running.say(("stdout", "hello"), ("stderr", "careful"))
    running.progress(0.5, "training")
    running.succeed()

    out = ok(fairgpu(url, "watch", running.task_id))
    lines = [line.split(" ", 1)[1] for line in out.splitlines()[:6]]
    assert lines == [
        "PENDING  short  queued",
        "STARTED  short  on cpu@test, GPU 0",
        "progress 25%  loading",
        "out hello",
        "err careful",
        "progress 50%  training",
    ]
    assert "SUCCESS" in out.splitlines()[6]


def test_watch_on_a_terminal_draws_a_progress_bar_and_prints_lines_live(
    url: str, running: Running, commands: list[Command]
) -> None:
    watch = Command(url, "watch", running.task_id, env={"FORCE_COLOR": "1", "TERM": "xterm"})
    commands.append(watch)
    watch.shows("STARTED")

    running.progress(0.4, "epoch 4 of 10")
    watch.shows("40%", "epoch 4 of 10", "━")  # the bar, drawn while the job runs
    running.say(("stderr", "a warning"))
    watch.shows("a warning")
    running.succeed()

    code, out, err = watch.ended()
    assert (code, err) == (0, "")
    assert "\x1b[" in out


def test_status_shows_progress_while_running_and_artifacts_at_the_end(
    url: str, running: Running, settings: Settings
) -> None:
    assert "progress" not in ok(fairgpu(url, "status", running.task_id))
    running.progress(0.75, "almost")
    assert row(ok(fairgpu(url, "status", running.task_id)), "progress") == "75%  almost"
    state = as_json(fairgpu(url, "status", running.task_id, "--json"))
    assert state["progress"] == {"fraction": 0.75, "message": "almost"}

    listing = [store_file(settings, running.task_id, "model.bin", b"w" * 2048)]
    running.succeed(listing)
    table = ok(fairgpu(url, "status", running.task_id))
    assert row(table, "artifacts") == "model.bin (2.0 KiB)"
    assert "progress" not in table


# -- artifacts ------------------------------------------------------------------------------------
def test_artifacts_lists_name_size_and_sha256_and_downloads_them_checked(
    url: str, running: Running, settings: Settings, tmp_path: Path
) -> None:
    assert "No artifacts yet: the job is STARTED" in ok(fairgpu(url, "artifacts", running.task_id))
    files = {"model.bin": os.urandom(300_000), "plots/loss.csv": b"epoch,loss\n1,0.5\n"}
    listing = [store_file(settings, running.task_id, n, c) for n, c in files.items()]
    running.succeed(listing)

    table = ok(fairgpu(url, "artifacts", running.task_id))
    for item in listing:
        assert f"{item['name']} " in table
        assert str(item["sha256"]) in table
    assert "293.0 KiB" in table
    assert as_json(fairgpu(url, "artifacts", running.task_id, "--json")) == listing

    folder = tmp_path / "fetched"
    out = ok(fairgpu(url, "artifacts", running.task_id, "--download", str(folder)))
    assert "Downloaded 2 files to " in out
    for name, content in files.items():
        assert (folder / name).read_bytes() == content
    assert sorted(p.name for p in folder.rglob("*")) == ["loss.csv", "model.bin", "plots"]


def test_a_download_that_does_not_match_its_sha256_is_not_saved(
    url: str, running: Running, settings: Settings, tmp_path: Path
) -> None:
    good = store_file(settings, running.task_id, "good.txt", b"fine")
    bad = store_file(settings, running.task_id, "bad.txt", b"altered on the way")
    gone = {**good, "name": "gone.txt"}  # listed, but not in the store
    running.succeed([good, {**bad, "sha256": hashlib.sha256(b"the original").hexdigest()}, gone])

    folder = tmp_path / "fetched"
    result = fairgpu(url, "artifacts", running.task_id, "--download", str(folder))
    assert result.exit_code == 1
    first, second = result.stderr.splitlines()
    assert first.startswith("fairgpu: 'bad.txt': the download does not match its listing")
    assert second.startswith("fairgpu: 'gone.txt': 404 artifact not found at ")
    assert sorted(p.name for p in folder.iterdir()) == ["good.txt"]  # no partial file left
    assert "saved " in result.stdout


def test_a_hostile_name_never_leads_out_of_the_download_folder(
    url: str, running: Running, settings: Settings, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = tmp_path / "fetched"
    folder.mkdir()
    (folder / "link").symlink_to(outside, target_is_directory=True)
    good = store_file(settings, running.task_id, "ok.txt", b"fine")
    # The names a misbehaving (or hostile) server might list; none may be written.
    hostile = ["../escape.txt", "/tmp/absolute.txt", "a/../../b.txt", "a//b", "link/in.txt"]
    running.succeed([good, *({**good, "name": name} for name in hostile)])

    result = fairgpu(url, "artifacts", running.task_id, "--download", str(folder))
    assert result.exit_code == 1
    problems = result.stderr.splitlines()
    assert len(problems) == len(hostile)
    for name, problem in zip(hostile, problems, strict=True):
        assert problem.startswith(f"fairgpu: {name!r}: ")
    assert "leads out of" in problems[-1]
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "escape.txt").exists()
    assert sorted(p.name for p in folder.iterdir()) == ["link", "ok.txt"]


@pytest.mark.parametrize(
    "name", ["..", "../x", "a/..", "/x", "", "a/", "./a", "a\\b", "nul\x00", "bell\x07"]
)
def test_only_a_relative_name_of_plain_parts_becomes_a_path(name: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="refused"):
        local_path(tmp_path, name)
    assert local_path(tmp_path, "plots/loss.png") == tmp_path / "plots" / "loss.png"
