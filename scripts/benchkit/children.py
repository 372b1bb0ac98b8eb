"""The processes a benchmark starts for itself: children through app.dev.processes (the one
spawn, stop and wait_until of fairgpu's tooling), an embedded redis-server, Celery workers."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from app.dev import processes
from app.dev.redis_server import RedisServer
from app.wiring.celery_app import worker_argv

from .host import ROOT

#: Set to a folder to keep the logs of every process a benchmark starts.
LOG_DIR_ENV = "BENCH_LOG_DIR"


def spawn(argv: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """processes.spawn in the repository root with this process's environment plus env; the
    log goes to a file of the same name in BENCH_LOG_DIR instead, when that is set."""
    kept = os.environ.get(LOG_DIR_ENV)
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        log = Path(kept) / log.name
    return processes.spawn(argv, {**os.environ, **env}, log, cwd=ROOT)


@contextlib.contextmanager
def embedded_redis(workdir: Path) -> Iterator[RedisServer]:
    """An embedded redis-server (never the machine's), without persistence."""
    with RedisServer(workdir / "redis") as server:
        yield server


def celery_worker(app_module: str, queues: Sequence[str], hostname: str, *extra: str) -> list[str]:
    """The command line of a worker of another Celery app, run as fairgpu's workers are
    (app.wiring.celery_app.worker_argv: solo pool, prefetch 1) but at log level WARNING, so
    that no variant pays for a log line per task; extra options go last."""
    argv = worker_argv(list(queues), hostname)
    argv[argv.index("--loglevel") + 1] = "WARNING"
    return [sys.executable, "-m", "celery", "-A", app_module, *argv, *extra]
