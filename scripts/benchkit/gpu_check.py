"""The checks a GPU machine can make that CI cannot: run it once on a machine with a GPU.

    uv run --extra torch python scripts/gpu_check.py [--out DIR]

1. The workload runs on the device: bf16 matmul for a few seconds, with the TFLOP/s it reached.
2. A job runs end to end on the device: JobRunner on an embedded Redis, gpu_id and tflops in
   the job's record, billed once.
3. A worker pinned to two devices refuses to start: `python -m app.worker` with
   CUDA_VISIBLE_DEVICES=0,1 exits non-zero with a clear message.

It prints what it measured and writes it to DIR/gpu_check.json (DIR: --out, else $OUT, else .).
`--cpu` runs the same checks on torch's CPU device, to try the script on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import redis

from app.auth import Accounts
from app.dev.redis_server import RedisServer
from app.ledger.outbox import unwritten
from app.settings import Settings
from app.store.keys import job_key
from app.worker import gpu
from app.worker.runner import build_worker
from scripts.benchkit.host import ROOT


def workload(device: str) -> dict[str, Any]:
    """Check 1: the matmul loop on the device."""
    n = gpu.MATRIX_N if device == "cuda" else 256
    outcome = gpu.matmul(device, n, 3.0, should_stop=lambda: False)
    return {"device": device, "n": n, "seconds": outcome.seconds, "tflops": outcome.tflops}


def job_on_device(device: gpu.Device) -> dict[str, Any]:
    """Check 2: one burn job through the real runner, its warm child process, the store and
    billing, on an embedded Redis."""
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as server:
        settings = Settings(redis_url=server.url, users_file=ROOT / "fixtures" / "users.json")
        service, runner = build_worker(settings, Accounts.load(settings.users_file), device)
        runner.start()
        r = redis.Redis.from_url(server.url)
        owner = "11111111-1111-1111-1111-111111111111"
        r.hset(job_key("gpu-check"), mapping={
            "task_id": "gpu-check", "owner": owner, "kind": "short", "duration_s": "2.0",
            "type": "burn", "status": "PENDING", "attempts": 0, "enqueued_at": 0,
        })  # fmt: skip
        service.queues["short"].enqueue(owner, [service.job_item("short", "gpu-check", 2.0)])
        lease = service.queues["short"].dequeue()
        assert lease is not None
        outcome = runner.run("short", "gpu-check", lease.token)
        job = service.recorder.get("gpu-check")
        bills = len(unwritten(r, owner))  # no ledger writer here: the bill waits in the outbox
        runner.close()
        service.close()
        r.close()
    return {"outcome": outcome, "status": job and job.status, "gpu_id": job and job.gpu_id,
            "tflops": job and job.tflops, "bills": bills,
            "peak_gpu_memory_bytes": job and job.peak_gpu_memory_bytes}  # fmt: skip


def refuses_two_devices() -> dict[str, Any]:
    """Check 3: a worker told to drive two devices does not start."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"}
    run = subprocess.run(
        [sys.executable, "-m", "app.worker.main"], env=env, capture_output=True, text=True,
        timeout=120, cwd=ROOT, check=False,
    )  # fmt: skip
    return {"exit_code": run.returncode, "message": run.stderr.strip().splitlines()[-1:]}


def torch_version() -> str:
    """The installed torch's version (the torch extra must be installed)."""
    import torch

    return str(torch.__version__)


def main() -> int:
    """Run the three checks and record what they measured."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--cpu", action="store_true", help="use torch's CPU device instead")
    args = parser.parse_args()
    device = gpu.CPU if args.cpu else gpu.Device(gpu_id=0)
    results = {
        "torch": torch_version(),
        "cuda_devices": gpu.torch_cuda_count(),
        "workload": workload("cpu" if args.cpu else "cuda"),
        "job": job_on_device(device),
        "two_devices": refuses_two_devices(),
    }
    ok = (
        results["job"]["status"] == "SUCCESS"
        and results["job"]["bills"] == 1
        and results["two_devices"]["exit_code"] != 0
    )
    results["ok"] = ok
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(results, indent=2, default=str))
    print(json.dumps(results, indent=2, default=str))
    return 0 if ok else 1
