"""`fairgpu dev` as a newcomer starts and stops it (the real command, as a process): it says it
is up only once a worker takes jobs, it keeps its logs when it stops and says where, and its
embedded Redis listens on the port chosen for it."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from app.dev.redis_server import free_port
from tests.e2e.test_dev_heals import fairgpu_dev

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_the_stack_says_it_is_up_only_once_a_worker_takes_jobs(tmp_path: Path) -> None:
    with fairgpu_dev(tmp_path) as dev:  # returns as soon as the banner is printed
        health = httpx.get(f"{dev.url}/health", timeout=10).json()
        assert dev.lines("fairgpu is up")
        assert health["workers_ready"] >= 1, health


def test_the_logs_outlive_the_stack_and_its_redis_takes_the_chosen_port(tmp_path: Path) -> None:
    redis_port = free_port()
    temporary = tmp_path / "tmp"  # where the run's own folder and its logs' folder go
    temporary.mkdir()
    with fairgpu_dev(tmp_path, "--redis-port", str(redis_port), TMPDIR=str(temporary)) as dev:
        [said] = dev.lines("logs in ")
        assert f"redis://127.0.0.1:{redis_port}/0 (embedded" in said
        redis_pid = dev.child("redis-server")
        assert redis_pid is not None
        assert dev.children()[redis_pid].split()[-1].endswith(f":{redis_port}")
        submitted = dev.submit(0.1)
        dev.reaches(submitted, "SUCCESS")

    logs = Path(re.split(r"; logs in ", said)[1])
    assert dev.console().splitlines()[-1] == f"stopped; its logs stay in {logs}"
    assert logs.parent == temporary
    for name in ("api.log", "cpu1.log", "redis.log"):
        assert (logs / name).stat().st_size > 0, name
    assert submitted in (logs / "cpu1.log").read_text()  # the worker's own words of the job
    assert [p for p in temporary.iterdir() if p != logs] == []  # the run's own folder is gone
