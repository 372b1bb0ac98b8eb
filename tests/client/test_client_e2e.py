"""`fairgpu submit --watch` end to end: real processes (Redis, the API, a Celery worker), the
command following a job over server-sent events until the worker has run it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from app.client.cli import cli
from app.dev.stack import Stack
from tests.support import DEMO_KEY, fast_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """A stack of its own (embedded Redis, the API, one CPU worker)."""
    started = Stack(fast_settings(), use_given_redis=False, workers=1, workdir=tmp_path)
    try:
        yield started.start()
    finally:
        started.stop()


def fairgpu(stack: Stack, *args: str) -> Result:
    env = {"FAIRGPU_URL": stack.url, "FAIRGPU_API_KEY": DEMO_KEY, "COLUMNS": "200"}
    return CliRunner().invoke(cli, list(args), env=env)


def test_submit_watch_follows_a_queued_job_until_the_worker_has_run_it(stack: Stack) -> None:
    # A job ahead of ours keeps the one worker busy, so ours waits in line first.
    ahead = fairgpu(stack, "submit", "short", "1.5", "--json")
    assert ahead.exit_code == 0, ahead.output

    result = fairgpu(stack, "submit", "short", "0.3", "--watch")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Submitted ")
    task_id = lines[0].split()[1]
    changes = [line.split()[1] for line in lines[1:] if line[:2].isdigit()]  # "HH:MM:SS STATUS"
    assert changes[0] == "PENDING"
    assert changes[-2:] == ["STARTED", "SUCCESS"]
    assert "SUCCESS" in result.stdout
    assert "cpu1@" in result.stdout
    # billed the 1 s minimum at 0.5 a second, for the seconds it ran (0.3 and a little)
    assert re.search(r"0\.50 \(0\.3\d* GPU-s, ", result.stdout)

    final = json.loads(fairgpu(stack, "status", task_id, "--json").stdout)
    assert final["status"] == "SUCCESS"


def test_submit_watch_json_prints_one_status_a_line_to_the_end(stack: Stack) -> None:
    result = fairgpu(stack, "submit", "short", "0.2", "--watch", "--json")
    assert result.exit_code == 0, result.output
    states = [json.loads(line) for line in result.stdout.splitlines()]
    assert states[0]["status"] == "PENDING"
    assert states[-1]["status"] == "SUCCESS"
    assert states[-1]["result"]["worker"].startswith("cpu1@")
    assert len({s["task_id"] for s in states}) == 1
