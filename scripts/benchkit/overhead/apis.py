"""The API processes the HTTP benchmarks load: fairgpu's (app.serve, as main.py runs it) and the
baseline (scripts/benchkit/overhead/trivial_api.py), each one uvicorn process on a free port."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from app.dev.processes import stop, wait_until
from app.dev.redis_server import free_port
from app.dev.stack import as_environment
from app.settings import Settings
from scripts.benchkit.children import spawn

UNLIMITED = 10**9
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Api:
    """A running API process."""

    process: subprocess.Popen[bytes]
    port: int

    @property
    def pid(self) -> int:
        """Its process id."""
        return self.process.pid


def write_users(path: Path, accounts: int) -> list[str]:
    """An accounts file with numbered accounts, one plain key each; returns the keys."""
    keys = [f"bench-key-{i:05d}" for i in range(accounts)]
    entries = [
        {"user_id": f"00000000-0000-0000-0000-{i:012d}", "api_keys": [key]}
        for i, key in enumerate(keys)
    ]
    path.write_text(json.dumps({"accounts": entries}))
    return keys


def fairgpu_settings(redis_url: str, workdir: Path, accounts: int) -> tuple[Settings, list[str]]:
    """Settings for a benchmark API: its own accounts, a rate limit and a per-account cap that
    the load never reaches (both still counted on every request); and the accounts' keys."""
    users = workdir / "users.json"
    keys = write_users(users, accounts)
    settings = Settings(
        redis_url=redis_url,
        users_file=users,
        database_url=f"sqlite:///{workdir / 'fairgpu.db'}",  # seeded from this users file
        port=free_port(),
        rate_limit_per_s=UNLIMITED,
        max_queued_per_account=UNLIMITED,
    )
    return settings, keys


def _ready(url: str, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"the API exited at start with {process.returncode}")
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def serve(module: str, env: dict[str, str], port: int, probe: str, log: Path) -> Iterator[Api]:
    """Run `python -m module` until the block ends; ready once GET probe answers 200."""
    process = spawn([sys.executable, "-m", module], env, log)
    try:
        ready = f"http://127.0.0.1:{port}{probe}"
        wait_until(lambda: _ready(ready, process), START_TIMEOUT_S, module)
        yield Api(process, port)
    finally:
        stop(process)


@contextmanager
def fairgpu_api(settings: Settings, log: Path) -> Iterator[Api]:
    """fairgpu's API with these settings."""
    with serve("app.api.serve", as_environment(settings), settings.port, "/health", log) as api:
        yield api


@contextmanager
def baseline_api(log: Path) -> Iterator[Api]:
    """The baseline API."""
    port = free_port()
    env = {"PORT": str(port)}
    with serve("scripts.benchkit.overhead.trivial_api", env, port, "/openapi.json", log) as api:
        yield api
