"""`fairgpu dev` heals itself, run as a person runs it (the real command, as a process): a worker
or an embedded Redis that dies is started again, a REDIS_URL Redis that goes away is waited for,
and each of these is one line on the console, never a traceback."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.dev.redis_server import RedisServer, free_port
from app.worker.reaper import alive
from tests.support import DEMO_KEY, FIXTURES, child_environment, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
#: Short leases and a fast timer, so that a dead worker's job comes back in seconds.
FAST = {"LEASE_SECONDS": "2", "HEARTBEAT_SECONDS": "0.5", "RECLAIM_INTERVAL_S": "0.3"}
START_S = 90.0  # a stack's start on a busy machine: Redis, the API, a Celery worker


@dataclass
class Dev:
    """One `fairgpu dev` process, its console output and its API."""

    process: subprocess.Popen[bytes]
    url: str
    output: Path

    def console(self) -> str:
        """What the command has printed so far (stdout and stderr)."""
        return self.output.read_text(errors="replace")

    def lines(self, text: str) -> list[str]:
        """The console's lines that contain text."""
        return [line for line in self.console().splitlines() if text in line]

    def children(self) -> dict[int, str]:
        """The processes the command started: pid -> command line."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid == self.process.pid:
                    found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        return {pid: cmd.decode(errors="replace") for pid, cmd in found.items()}

    def child(self, marker: str) -> int | None:
        """The pid of the one live child whose command line contains marker, if there is one."""
        pids = [pid for pid, cmd in self.children().items() if marker in cmd and alive(pid)]
        assert len(pids) <= 1, pids
        return pids[0] if pids else None

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request with the demo key."""
        headers = {"X-API-Key": DEMO_KEY}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=30, **kwargs)

    def healthy(self) -> bool:
        """Whether /health answers 200."""
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        return False

    def submit(self, duration_s: float) -> str:
        """Submit a short job; its task id."""
        reply = self.call("POST", "/enqueue-task", json={"kind": "short", "duration_s": duration_s})
        assert reply.status_code == 200, reply.text
        return str(reply.json()["task_id"])

    def state(self, task_id: str) -> dict[str, Any] | None:
        """The job's status (None while the API cannot say)."""
        with contextlib.suppress(httpx.HTTPError):
            reply = self.call("GET", f"/task-status/{task_id}")
            if reply.status_code == 200:
                return dict(reply.json())
        return None

    def reaches(self, task_id: str, status: str, timeout: float = START_S) -> dict[str, Any]:
        """Wait until the job has the status; its state then."""

        def there() -> dict[str, Any] | None:
            state = self.state(task_id)
            return state if state is not None and state["status"] == status else None

        return wait_for(there, timeout, f"{task_id} to be {status}")


@contextlib.contextmanager
def fairgpu_dev(tmp_path: Path, *options: str, **env: str) -> Iterator[Dev]:
    """Run `fairgpu dev --port P --workers 1` (and the options given) until it says it is up;
    SIGTERM it afterwards, and check that it stopped everything it had started."""
    port = free_port()
    # TMPDIR: the stack's folder, and its logs' folder that outlives it, stay in the test's own
    temporary = {"TMPDIR": str(tmp_path)}
    environment = {**child_environment(), **FAST, "USERS_FILE": str(FIXTURES), **temporary, **env}
    if "REDIS_URL" not in env:
        environment.pop("REDIS_URL", None)
    output = tmp_path / "console.txt"
    argv = [sys.executable, "-m", "app.client.cli", "dev", "--port", str(port), "--workers", "1"]
    argv += options
    with output.open("wb") as out:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=environment, stdout=out, stderr=subprocess.STDOUT
        )
    dev = Dev(process, f"http://127.0.0.1:{port}", output)
    started: set[int] = set()
    try:
        up = "Ctrl-C stops everything"  # the banner's last line: the stack is up
        wait_for(lambda: up in dev.console() or process.poll() is not None, START_S, "the stack")
        assert process.poll() is None, dev.console()
        assert dev.healthy()
        started = set(dev.children())
        yield dev
        started |= set(dev.children())
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, dev.console()
        assert [pid for pid in started if alive(pid)] == [], "fairgpu dev left processes behind"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in started | set(dev.children()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_killed_worker_is_started_again_and_its_job_ends_success_billed_once(
    tmp_path: Path,
) -> None:
    with fairgpu_dev(tmp_path) as dev:
        task_id = dev.submit(3)
        dev.reaches(task_id, "STARTED")
        worker = dev.child("app.worker.main")
        assert worker is not None
        os.kill(worker, signal.SIGKILL)

        # The only worker is gone: the job comes back only if the stack starts another.
        done = dev.reaches(task_id, "SUCCESS")
        assert done["attempts"] == 2
        bills = [b for b in dev.call("GET", "/billing-records").json() if b["task_id"] == task_id]
        assert len(bills) == 1
        assert dev.child("app.worker.main") not in (None, worker)
        said = dev.lines("exited")
        assert said == [said[0]]
        assert "worker cpu1 exited (killed by SIGKILL); restarting it in" in said[0]
        assert "Traceback" not in dev.console()


def test_a_killed_embedded_redis_is_started_again_on_its_port_with_its_data(
    tmp_path: Path,
) -> None:
    with fairgpu_dev(tmp_path) as dev:
        before = dev.submit(0.2)
        dev.reaches(before, "SUCCESS")
        redis_pid = dev.child("redis-server")
        assert redis_pid is not None
        redis_cmd = dev.children()[redis_pid]  # "redis-server 127.0.0.1:PORT"
        os.kill(redis_pid, signal.SIGKILL)

        wait_for(lambda: dev.lines("Redis back"), START_S, "Redis to be back")
        again = dev.child("redis-server")
        assert again not in (None, redis_pid)
        assert dev.children()[again] == redis_cmd  # the same port
        wait_for(dev.healthy, START_S, "the API to be healthy again")
        assert dev.reaches(before, "SUCCESS")  # its data: the append-only file
        after = dev.submit(0.2)
        dev.reaches(after, "SUCCESS")
        [down] = dev.lines("Redis down")
        assert "the embedded Redis on port" in down
        assert "exited (killed by SIGKILL)" in down
        assert len(dev.lines("Redis back")) == 1
        assert "Traceback" not in dev.console()


def test_a_redis_url_that_goes_away_is_waited_for_in_one_line_and_never_replaced(
    tmp_path: Path,
) -> None:
    server = RedisServer(tmp_path / "redis", appendonly=True).start()
    try:
        with fairgpu_dev(tmp_path, REDIS_URL=server.url) as dev:
            assert f"{server.url} (from REDIS_URL)" in dev.console()
            server.kill()
            wait_for(lambda: dev.lines("Redis down"), START_S, "the console to say Redis is down")
            # The API sees it too, and the stack starts no Redis of its own meanwhile.
            wait_for(lambda: not dev.healthy(), START_S, "/health to fail")
            assert dev.child("redis-server") is None

            server.start()  # the same port and files
            wait_for(lambda: dev.lines("Redis back"), START_S, "the console to say it is back")
            wait_for(dev.healthy, START_S, "the API to be healthy again")
            dev.reaches(dev.submit(0.2), "SUCCESS")
            assert len(dev.lines("Redis down")) == 1
            assert len(dev.lines("Redis back")) == 1
            assert "Traceback" not in dev.console()
            assert dev.child("redis-server") is None
    finally:
        server.stop()
