"""End-to-end fixtures: a whole stack of real processes (Redis, the API, Celery workers), and
what the script jobs' tests share: a stack for a module, a project's upload, a script's submit."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.dev.redis_server import RedisServer
from app.dev.stack import Stack
from tests.code.archives import project
from tests.support import DEMO_KEY, OTHER_KEY, fast_settings, wait_for

ENDED = ("SUCCESS", "FAILURE", "REVOKED")


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """Start a stack (on its own embedded Redis) with n workers; stopped after the test."""
    stacks: list[Stack] = []

    def start(workers: int = 1, **overrides: object) -> Stack:
        stack = Stack(
            fast_settings(**overrides),
            use_given_redis=False,
            workers=workers,
            workdir=tmp_path / f"stack{len(stacks)}",
        )
        stack.workdir.mkdir()
        stacks.append(stack)
        return stack.start()

    yield start
    for stack in stacks:
        stack.stop()


@contextmanager
def script_stack(
    logs: Path,
    workers: int = 1,
    *,
    redis_password: str | None = None,
    worker_env: dict[str, str] | None = None,
    **overrides: object,
) -> Iterator[Stack]:
    """A started stack for script jobs, its workers taking jobs. Its workdir is a folder of the
    system's temporary folder that anyone may enter (the sandbox's user must reach the job
    folders and environments under it; a test's tmp_path lies in a folder only root enters); its
    logs go to `logs`, kept after it stops. With redis_password, its Redis requires it.
    worker_env: more environment variables for each worker alone (a secret the tests look for)."""
    with ExitStack() as stack_of:
        workdir = Path(tempfile.mkdtemp(prefix="fairgpu-e2e-"))
        workdir.chmod(0o711)
        stack_of.callback(shutil.rmtree, workdir, ignore_errors=True)
        if redis_password is not None:
            server = RedisServer(workdir / "redis", password=redis_password, appendonly=True)
            stack_of.enter_context(server)  # started here
            overrides["redis_url"] = server.url
        stack = Stack(
            fast_settings(**overrides),
            use_given_redis=redis_password is not None,
            workers=0,
            workdir=workdir,
            log_dir=logs,
        )
        stack_of.callback(stack.stop)
        stack.start()
        for i in range(1, workers + 1):
            stack.start_worker(f"cpu{i}", env=worker_env)
        stack.wait_for_workers()
        yield stack


def new_password() -> str:
    """A Redis password for a test's stack."""
    return secrets.token_hex(16)


def upload(stack: Stack, folder: Path, files: dict[str, bytes], key: str = DEMO_KEY) -> str:
    """Pack `files` as a project, upload it, and return its code id."""
    body = project(folder / f"{secrets.token_hex(4)}.tar.gz", files).read_bytes()
    reply = httpx.post(
        f"{stack.url}/code",
        content=body,
        headers={"X-API-Key": key, "Content-Type": "application/gzip"},
        timeout=60,
    )
    assert reply.status_code in (200, 201), reply.text
    assert reply.json()["code_id"] == hashlib.sha256(body).hexdigest()
    return str(reply.json()["code_id"])


def script_body(
    code: str,
    command: list[str],
    env: dict[str, str] | None = None,
    duration_s: float = 30,
    **more: object,
) -> dict[str, Any]:
    """The body of a script job's submit."""
    inp: dict[str, Any] = {"code": code, "command": command}
    if env is not None:
        inp["env"] = env
    return {"type": "script", "input": inp, "duration_s": duration_s, **more}


def post_job(stack: Stack, body: dict[str, Any], key: str = DEMO_KEY) -> httpx.Response:
    """POST /enqueue-task, as it answers."""
    return httpx.post(
        f"{stack.url}/enqueue-task", headers={"X-API-Key": key}, json=body, timeout=10
    )


def run_script(
    stack: Stack,
    code: str,
    command: list[str],
    env: dict[str, str] | None = None,
    key: str = DEMO_KEY,
    **more: object,
) -> str:
    """Submit a script job; its task id."""
    body = {**script_body(code, command, env), **more}
    reply = post_job(stack, body, key)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["task_id"])


def job(stack: Stack, task_id: str, key: str = DEMO_KEY) -> dict[str, Any]:
    """GET /task-status of a job."""
    reply = httpx.get(f"{stack.url}/task-status/{task_id}", headers={"X-API-Key": key}, timeout=10)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def ended(stack: Stack, task_id: str, key: str = DEMO_KEY, timeout: float = 90) -> dict[str, Any]:
    """The job's status once it has ended."""

    def done() -> dict[str, Any] | None:
        state = job(stack, task_id, key)
        return state if state["status"] in ENDED else None

    return wait_for(done, timeout, f"job {task_id} ends")


def log_text(stack: Stack, task_id: str, key: str = DEMO_KEY) -> str:
    """The job's log so far, one line each."""
    reply = httpx.get(f"{stack.url}/tasks/{task_id}/logs", headers={"X-API-Key": key}, timeout=10)
    assert reply.status_code == 200, reply.text
    return "\n".join(line["text"] for line in reply.json()["lines"])


def logged(stack: Stack, task_id: str, words: str, timeout: float = 90) -> str:
    """Wait until the job's log holds `words`; the log then. Fails at once if the job ends
    without them."""

    def seen() -> str | None:
        text = log_text(stack, task_id)
        if words in text:
            return text
        state = job(stack, task_id)
        if state["status"] in ENDED:
            raise AssertionError(f"job ended {state['status']} ({state.get('error')}): {text}")
        return None

    return wait_for(seen, timeout, f"{words!r} in the log of {task_id}")


def host_processes(token: str) -> list[int]:
    """Pids of the host's processes whose command line holds `token` (not this one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline:
            found.append(int(entry.name))
    return found


__all__ = ["DEMO_KEY", "OTHER_KEY", "wait_for"]
