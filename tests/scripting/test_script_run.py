"""The script type's run, with the real bubblewrap, uv and Redis: a project with neither lock nor
requirements, its log, progress, artifacts, output and exit code, and its stops.

Each test calls the runner that the type's setup() makes, with a JobContext built by hand as the
worker builds one: its artifacts and checkpoint folders private (0700) temporary folders.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from app.artifacts import open_artifacts
from app.code.store import AREA, CodeStore
from app.jobs.context import JobCancelledError, JobContext, JobFailedError, JobPreemptedError
from app.scripting import sandbox
from app.scripting.places import OutputError
from app.scripting.run import CodeGoneError, SandboxError, ScriptRunner
from app.scripting.worker import runner_from_settings
from app.settings import Settings
from tests.scripting.test_envs import wheel

UNAVAILABLE = sandbox.available()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no sandbox here: {UNAVAILABLE}"),
]

TRAIN = """
import json, os, sys
print("hello from", os.getcwd() == os.environ["HOME"])
print("fairgpu:progress 0.5 half way", flush=True)
print("fairgpu:progress lots")
print("on stderr", file=sys.stderr)
print("variables", sorted(os.environ))
with open(os.path.join(os.environ["FAIRGPU_ARTIFACTS_DIR"], "model.txt"), "w") as f:
    f.write("weights")
with open(os.environ["FAIRGPU_OUTPUT"], "w") as f:
    json.dump({"loss": 0.25, "lr": os.environ["LR"]}, f)
sys.exit(int(os.environ.get("EXIT", "0")))
"""

#: Starts a child that saves a checkpoint on SIGTERM, says it is ready, and waits for it; the
#: script itself passes no signal on (its SIGTERM does nothing), so the child's comes from the stop.
STOPPABLE = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, lambda *_: None)
child = subprocess.Popen([sys.executable, "child.py"])
while not os.path.exists("ready"):
    time.sleep(0.01)
print("ready", flush=True)
child.wait()
sys.exit(3)
"""
CHILD = """
import os, signal, time
def saved(*_):
    with open(os.path.join(os.environ["FAIRGPU_CHECKPOINT_DIR"], "step"), "w") as f:
        f.write("42")
    os._exit(0)
signal.signal(signal.SIGTERM, saved)
open("ready", "w").close()
while True:
    time.sleep(1)
"""


@dataclass
class Seen:
    """What a run said through its context."""

    log: list[str] = field(default_factory=list)
    progress: list[tuple[float, str]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    ready: threading.Event = field(default_factory=threading.Event)

    def said(self, text: str) -> None:
        lines = text.split("\n")  # ctx.log takes several lines at once, as the worker does
        self.log.extend(lines)
        if "ready" in lines:
            self.ready.set()


@pytest.fixture
def top() -> Iterator[Path]:
    """A folder the sandbox's user may pass through (pytest's own is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="fairgpu-script-test-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.fixture
def settings(top: Path, redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url,
        artifacts_dir=top / "artifacts",
        script_work_dir=top / "runs",
        script_env_cache_dir=top / "envs",
    )


@pytest.fixture
def runner(settings: Settings) -> ScriptRunner:
    return runner_from_settings(settings)


def upload(settings: Settings, top: Path, **files: str) -> str:
    """Store a project as POST /code does; its code id."""
    project = Path(tempfile.mkdtemp(dir=top))
    for name, text in files.items():
        (project / name.replace("_", ".")).write_text(text)
    archive = top / "code.tar.gz"
    with tarfile.open(archive, "w:gz") as packed:
        packed.add(project, arcname=".")
    code_id = hashlib.sha256(archive.read_bytes()).hexdigest()

    async def add() -> None:
        client = Redis.from_url(settings.redis_url)
        try:
            store = CodeStore(open_artifacts(settings).within(AREA), client)
            await store.add("alice", code_id, archive, 1 << 30)
        finally:
            await client.aclose()

    asyncio.run(add())
    return code_id


def context(seen: Seen, stop: threading.Event | None = None, yields: bool = False) -> JobContext:
    """A context as the worker makes one: its folders in private temporary folders."""
    child_folder = Path(tempfile.mkdtemp(prefix="fairgpu-child-"))
    output = Path(tempfile.mkdtemp(prefix="output-", dir=child_folder))
    checkpoint = Path(tempfile.mkdtemp(prefix="fairgpu-checkpoint-"))
    asked = stop or threading.Event()
    return JobContext(
        "job-1",
        None,
        None,
        time.time() + 120,
        (lambda: asked.is_set()) if not yields else (lambda: False),
        output_dir=output,
        _log=seen.said,
        _progress=lambda fraction, words: seen.progress.append((fraction, words)),
        checkpoint_dir=checkpoint,
        _yield=(lambda: asked.is_set()) if yields else (lambda: False),
        _note=seen.facts.update,
    )


def ask_when_ready(seen: Seen, ask: threading.Event) -> None:
    """Ask the run to stop (or yield) once its script says it is ready."""
    if seen.ready.wait(60):
        ask.set()


def cleanup(ctx: JobContext) -> None:
    shutil.rmtree(ctx.output_dir.parent)
    shutil.rmtree(ctx.checkpoint_dir)


def test_a_project_with_neither_lock_nor_requirements_runs(
    runner: ScriptRunner, settings: Settings, top: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKER_SECRET", "not for scripts")
    code = upload(settings, top, train_py=TRAIN)
    seen = Seen()
    ctx = context(seen)
    try:
        output = runner.run(ctx, code, ["python", "train.py"], {"LR": "0.1"})
        assert output == {"loss": 0.25, "lr": "0.1"}
        assert seen.facts["exit_code"] == 0
        assert seen.facts["environment"]["cached"] is False
        assert "hello from True" in seen.log and "on stderr" in seen.log
        assert "fairgpu:progress lots" in seen.log  # a malformed progress line is a log line
        assert seen.progress == [(0.5, "half way")]
        [variables] = [line for line in seen.log if line.startswith("variables")]
        assert "WORKER_SECRET" not in variables and "'LR'" in variables
        assert (ctx.output_dir / "model.txt").read_text() == "weights"
        # The worker's again after the run, to upload and delete.
        assert (ctx.output_dir / "model.txt").stat().st_uid == os.geteuid()
        assert list(settings.script_work_dir.iterdir()) == []  # type: ignore[union-attr]

        again = Seen()
        second = context(again)
        runner.run(second, code, ["python", "train.py"], {"LR": "0.2"})
        assert again.facts["environment"]["cached"] is True
        cleanup(second)
    finally:
        cleanup(ctx)


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (["python", "train.py"], 3),
        (["python", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], -9),
        (["no-such-command"], 127),
    ],
)
def test_an_exit_code_other_than_0_fails_the_job(
    runner: ScriptRunner, settings: Settings, top: Path, command: list[str], code: int
) -> None:
    code_id = upload(settings, top, train_py=TRAIN)
    seen = Seen()
    ctx = context(seen)
    try:
        with pytest.raises(JobFailedError) as failed:
            runner.run(ctx, code_id, command, {"LR": "1", "EXIT": "3"})
        assert failed.value.kind == "exit_code"
        assert str(failed.value) == f"script exited with code {code}"
        assert seen.facts["exit_code"] == code
    finally:
        cleanup(ctx)


def test_a_link_as_the_output_file_fails_the_job(
    runner: ScriptRunner, settings: Settings, top: Path
) -> None:
    link = "import os; os.symlink('/etc/hostname', os.environ['FAIRGPU_OUTPUT'])"
    code = upload(settings, top, train_py=TRAIN)
    ctx = context(Seen())
    try:
        with pytest.raises(OutputError, match="link"):
            runner.run(ctx, code, ["python", "-c", link], {})
    finally:
        cleanup(ctx)


def test_a_stop_sends_sigterm_to_the_processes_the_script_started(
    runner: ScriptRunner, settings: Settings, top: Path
) -> None:
    code = upload(settings, top, train_py=STOPPABLE, child_py=CHILD)
    seen, stop = Seen(), threading.Event()
    ctx = context(seen, stop)
    threading.Thread(target=ask_when_ready, args=(seen, stop), daemon=True).start()
    try:
        with pytest.raises(JobCancelledError, match="code 3"):
            runner.run(ctx, code, ["python", "train.py"], {})
        assert (ctx.checkpoint_dir / "step").read_text() == "42"
        assert seen.facts["exit_code"] == 3
        assert any("asked to stop" in line for line in seen.log)
    finally:
        cleanup(ctx)


def test_a_script_that_ends_after_a_yield_ask_has_yielded(
    runner: ScriptRunner, settings: Settings, top: Path
) -> None:
    code = upload(settings, top, train_py=STOPPABLE, child_py=CHILD)
    seen, ask = Seen(), threading.Event()
    ctx = context(seen, ask, yields=True)
    threading.Thread(target=ask_when_ready, args=(seen, ask), daemon=True).start()
    try:
        with pytest.raises(JobPreemptedError):
            runner.run(ctx, code, ["python", "train.py"], {})
        assert (ctx.checkpoint_dir / "step").read_text() == "42"  # kept for the next run
        assert (ctx.checkpoint_dir / "step").stat().st_uid == os.geteuid()
    finally:
        cleanup(ctx)


def test_unconfined_scripts_run_too(settings: Settings, top: Path) -> None:
    unconfined = runner_from_settings(settings.model_copy(update={"script_sandbox": "none"}))
    code = upload(settings, top, train_py=TRAIN)
    seen = Seen()
    ctx = context(seen)
    try:
        assert unconfined.run(ctx, code, ["python", "train.py"], {"LR": "3"})["lr"] == "3"
        assert seen.facts["exit_code"] == 0
    finally:
        cleanup(ctx)


def test_a_worker_without_a_usable_sandbox_refuses_script_jobs(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, top: Path
) -> None:
    monkeypatch.setenv("PATH", str(top))  # no bubblewrap on it
    with pytest.raises(RuntimeError, match=r"bwrap is not installed.*SCRIPT_SANDBOX=none"):
        runner_from_settings(settings)


@pytest.fixture
def offline(top: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The operator's index: a folder of wheels the sandbox's user may read, uv offline."""
    wheels = top / "wheels"
    wheels.mkdir()
    wheels.chmod(0o755)
    wheel(wheels, "tinypkg", "1.0")
    for name, value in {
        "UV_OFFLINE": "1",
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(wheels),
    }.items():
        monkeypatch.setenv(name, value)
    return wheels


USES_TINYPKG = "import tinypkg; print('tinypkg', tinypkg.VERSION)\n"


def test_requirements_are_built_in_the_sandbox_then_reused(
    settings: Settings, top: Path, offline: Path
) -> None:
    runner = runner_from_settings(settings)  # after the operator's uv settings are in place
    code = upload(settings, top, train_py=USES_TINYPKG, requirements_txt="tinypkg==1.0\n")
    first, second = Seen(), Seen()
    for seen in (first, second):
        ctx = context(seen)
        try:
            runner.run(ctx, code, ["python", "train.py"], {})
        finally:
            cleanup(ctx)
        assert "tinypkg 1.0" in seen.log
    assert first.facts["environment"]["cached"] is False
    assert any("tinypkg==1.0" in line for line in first.log)  # the build's output
    assert second.facts["environment"] == {"cached": True, "seconds": 0.0}
    [built] = list((settings.script_env_cache_dir or top).joinpath("envs").iterdir())
    assert built.stat().st_uid == os.geteuid()  # the worker's: no script may change it


def test_a_failed_build_fails_the_job_with_its_output(
    settings: Settings, top: Path, offline: Path
) -> None:
    runner = runner_from_settings(settings)
    code = upload(settings, top, train_py=USES_TINYPKG, requirements_txt="nosuchpkg==9\n")
    seen = Seen()
    ctx = context(seen)
    try:
        with pytest.raises(JobFailedError) as failed:
            runner.run(ctx, code, ["python", "train.py"], {})
    finally:
        cleanup(ctx)
    assert failed.value.kind == "environment"
    assert any("nosuchpkg" in line for line in seen.log)
    assert seen.facts["environment"]["cached"] is False
    assert "exit_code" not in seen.facts


def test_a_project_naming_its_own_index_is_refused(
    runner: ScriptRunner, settings: Settings, top: Path
) -> None:
    requirements = "--index-url https://example.org/simple\ntinypkg\n"
    code = upload(settings, top, train_py=USES_TINYPKG, requirements_txt=requirements)
    seen = Seen()
    ctx = context(seen)
    try:
        with pytest.raises(JobFailedError, match="refused") as failed:
            runner.run(ctx, code, ["python", "train.py"], {})
    finally:
        cleanup(ctx)
    assert failed.value.kind == "environment"
    assert any("--index-url" in line for line in seen.log)


def test_code_no_longer_stored_is_said_plainly(runner: ScriptRunner) -> None:
    ctx = context(Seen())
    try:
        with pytest.raises(CodeGoneError, match="no longer stored"):
            runner.run(ctx, "cd" * 32, ["python", "-c", "pass"], {})
    finally:
        cleanup(ctx)


def test_a_script_that_ends_the_sandboxs_own_processes_has_no_exit_code(
    runner: ScriptRunner, settings: Settings, top: Path
) -> None:
    kills_its_parent = "import os, time; os.kill(os.getppid(), 9); time.sleep(30)"
    code = upload(settings, top, train_py=TRAIN)
    seen = Seen()
    ctx = context(seen)
    try:
        with pytest.raises(SandboxError, match="without the script's exit code"):
            runner.run(ctx, code, ["python", "-c", kills_its_parent], {})
    finally:
        cleanup(ctx)
    assert "exit_code" not in seen.facts


def test_a_script_still_running_when_its_budget_ends_is_stopped(
    runner: ScriptRunner, settings: Settings, top: Path
) -> None:
    """The worker turns ctx.cancelled on at the budget's end (app/worker/deadline.py)."""
    code = upload(settings, top, train_py=TRAIN)
    seen = Seen()
    ends = time.time() + 1.0
    ctx = replace(context(seen), deadline=ends, _stop=lambda: time.time() >= ends)
    try:
        with pytest.raises(JobCancelledError, match="code -15"):
            runner.run(ctx, code, ["python", "-c", "import time; time.sleep(60)"], {})
    finally:
        cleanup(ctx)
    assert seen.facts["exit_code"] == -15
