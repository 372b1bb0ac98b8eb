"""A real worker process (worker.py) that cannot find its place in the fleet stops at start, with
exit code 1 and one line that says why, before it runs anything or reaches Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration  # each test starts a worker process


def started(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("WORKER_", "GPU_"))}
    # No Redis is listening there: the worker must stop before it needs one.
    base |= {"CUDA_VISIBLE_DEVICES": "-1", "REDIS_URL": "redis://127.0.0.1:1/0", **env}
    return subprocess.run(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_worker_whose_class_the_catalog_lacks_stops_with_one_line() -> None:
    catalog = json.dumps({"big": {"memory_gb": 80, "price": 2.0}})
    done = started(GPU_CLASSES=catalog, WORKER_GPU_CLASS="huge")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "fairgpu worker refuses to start: WORKER_GPU_CLASS='huge' is no class of GPU_CLASSES: "
        "big (80 GB)"
    ]
