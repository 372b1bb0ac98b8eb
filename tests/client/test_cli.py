"""The `fairgpu` command's own pieces."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from app.client.cli import cli
from app.dev.console import without_password

ROOT = Path(__file__).resolve().parents[2]
#: What the client commands must not load: the server's libraries and its own modules.
SERVER_MODULES = (
    "celery",
    "redis",
    "fastapi",
    "starlette",
    "uvicorn",
    "app.dev",
    "app.api",
    "app.store",
    "app.wiring.service",
    "app.worker",
)
#: Loads the command, runs `--help` and a `status` that finds no server, and prints the modules.
RUN_THE_CLIENT = """
import sys
from app.client.cli import cli
for args in (["--help"], ["status", "t1", "--url", "http://127.0.0.1:9", "--key", "k"]):
    try:
        cli(args)
    except SystemExit:
        pass
print("MODULES", *sorted(sys.modules))
"""


def test_a_password_in_the_redis_url_is_never_printed() -> None:
    assert without_password("redis://:s3cret@db:6379/0") == "redis://:***@db:6379/0"
    assert without_password("rediss://app:s3cret@db:6380/1") == "rediss://app:***@db:6380/1"
    assert without_password("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_help_lists_the_dev_command() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "dev" in result.output


def test_the_client_commands_load_no_server_module() -> None:
    run = subprocess.run(
        [sys.executable, "-c", RUN_THE_CLIENT], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "fairgpu: cannot reach http://127.0.0.1:9" in run.stderr  # `status` did run
    [line] = [line for line in run.stdout.splitlines() if line.startswith("MODULES ")]
    loaded = line.split()[1:]
    assert "app.client.cli" in loaded
    server = [m for m in loaded if any(m == s or m.startswith(f"{s}.") for s in SERVER_MODULES)]
    assert server == []
