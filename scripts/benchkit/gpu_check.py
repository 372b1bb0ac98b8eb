"""The checks only a machine with an NVIDIA GPU can make: run it once there.

    python scripts/gpu_check.py [--out DIR] [--cpu]     # DIR: --out, else $OUT, else .
    python scripts/gpu_check.py --docs DIR/gpu_check.json   # its table into docs/benchmarks.md

It starts the service as the Compose `gpu` profile does (an embedded Redis, the API, one worker
with CUDA_VISIBLE_DEVICES=0, JOB_MODULES=scripts.benchkit.gpu_jobs) and submits over HTTP, in
this order: a job that never touches CUDA as a fresh child's first job; `burn` against a plain
torch loop of the same products run in this process, alternately; `digits-train` twice (cold:
its child's first; warm); a job that leaks 8 GiB, then one that reports its child's memory; a
device-side assert, then `burn` and `digits-train`; a job out of GPU memory, then `burn`; a
burst of empty jobs for the dispatch gap. Each job is checked against what it should end as, and
billed once; a job harmed by an earlier one's fault would end otherwise. It writes DIR/
gpu_check.json and .md (the table) and keeps the API's and the worker's logs there.

`--cpu` runs the same sequence on a CPU worker, to try the script on a machine without a GPU:
the GPU's own outcomes (a sticky error, a leak, out of memory) are then only reported, not
required. torch is then optional: without it, the plain loop and the three jobs that need torch
to make their fault (the leak, the assert, out of memory) are left out, and the results say so.
Without --cpu and without torch it says in one line what to run instead. `--redis-port` (or
EMBEDDED_REDIS_PORT) sets the port of its own Redis.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.dev.stack import Stack
from app.jobs.builtin.burn import MATRIX_N, matmul
from app.settings import Settings
from scripts.benchkit.gpu_gangs import DDP_S, gang_steps, gang_verdicts
from scripts.benchkit.gpu_report import into_docs, render
from scripts.benchkit.host import ROOT

KEY = "default_api_key"  # the demo admin account of fixtures/users.json
JOB_MODULE = "scripts.benchkit.gpu_jobs"
LEAK_LIMIT_MB = 256  # CHILD_MAX_GPU_LEAK_MB's default, which the check keeps
BURN_S = 8.0
GAP_JOBS = 40
FRESH_JOBS = 8  # with CHILD_PER_JOB: each starts a child (and on a GPU, a CUDA context)
WAIT_S = 180.0
#: What to install when torch is missing, said in one line (the CUDA build is gigabytes).
TORCH_NEEDED = (
    "the GPU check needs torch (with CUDA) in its environment: "
    "uv run --extra torch python scripts/gpu_check.py (--cpu runs without it)"
)


@dataclass
class Run:
    """One job of the check: what it was, how it ended, what it should have ended as."""

    step: str
    type: str
    task_id: str
    status: str
    error_kind: str | None
    expect: str  # "SUCCESS", or "FAILURE:<error_kind>"; "any" where only reported
    output: Any = None
    peak_gpu_bytes: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    billed_s: float | None = None
    bills: int = 0

    @property
    def end(self) -> str:
        return self.status if self.error_kind is None else f"{self.status}:{self.error_kind}"

    @property
    def ok(self) -> bool:
        return self.bills == 1 and self.expect in ("any", self.end)


@dataclass
class Check:
    """The HTTP side: submit a job, wait for its end, remember it."""

    client: httpx.Client
    runs: list[Run] = field(default_factory=list)

    def job(self, step: str, type_: str, inp: dict[str, Any], expect: str, **extra: Any) -> Run:
        """Submit, wait, record."""
        return self.wait(self.submit(step, type_, inp, expect, **extra))

    def submit(self, step: str, type_: str, inp: dict[str, Any], expect: str, **extra: Any) -> Run:
        body = {"type": type_, "input": inp, **extra}
        answer = self.client.post("/enqueue-task", json=body)
        answer.raise_for_status()
        run = Run(step, type_, answer.json()["task_id"], "PENDING", None, expect)
        self.runs.append(run)
        return run

    def wait(self, run: Run, *, quiet: bool = False) -> Run:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            state = self.client.get(f"/task-status/{run.task_id}").json()
            if state["status"] in ("SUCCESS", "FAILURE", "REVOKED"):
                result = state.get("result") or {}
                run.status, run.error_kind = state["status"], state.get("error_kind")
                run.output, run.error = result.get("output"), state.get("error")
                run.peak_gpu_bytes = result.get("peak_gpu_memory_bytes")
                run.started_at, run.finished_at = (
                    result.get("started_at"),
                    result.get("finished_at"),
                )
                if not quiet:
                    _say(f"{run.step}: {run.type} {run.end}")
                return run
            time.sleep(0.05)  # polling the HTTP API, as a client does
        raise TimeoutError(f"{run.step}: {run.type} did not end within {WAIT_S:g} s")

    def bills(self) -> None:
        """Each run's bills (GET /billing-records) and the seconds billed."""
        records = self.client.get("/billing-records", params={"limit": 1000}).json()
        for run in self.runs:
            mine = [r for r in records if r["task_id"] == run.task_id]
            run.bills = len(mine)
            run.billed_s = mine[0]["gpu_seconds"] if mine else None


def sequence(check: Check, on_gpu: bool, plain: Callable[[], float | None]) -> dict[str, Any]:
    """The jobs, in the issue's order; returns the measurements beside the runs. Without torch
    (only with --cpu) the device's faults are skipped, and said to be."""
    check.job("fresh child", "gpu-memory", {}, "SUCCESS")
    burns, loops = [], []
    for _ in range(2):  # alternately, so that a drift of the card's clocks hits both
        loops.append(plain())
        burn = check.job("burn", "burn", {}, "SUCCESS", duration_s=BURN_S)
        burns.append((burn.output or {}).get("tflops"))
    cold = check.job("digits cold", "digits-train", {"epochs": 10}, "SUCCESS")
    warm = check.job("digits warm", "digits-train", {"epochs": 10}, "SUCCESS")
    faults = device_faults(check, on_gpu) if has_torch() else {"skipped": NO_TORCH_SKIPS}
    gangs = gang_steps(check, DDP_S if on_gpu else 2.0)  # issue 42: 2 cards refused, 1 runs
    gap = burst(check, "dispatch gap", GAP_JOBS)
    return {
        **gangs,
        "burn_tflops": burns,
        "plain_tflops": loops,
        "digits": {"cold": cold.task_id, "warm": warm.task_id},
        **faults,
        "gap_ms": _gaps(gap),
        "per_job_warm_s": _per_job(gap),
    }


#: What a --cpu run without torch leaves out: the jobs that need torch to make their fault.
NO_TORCH_SKIPS = ["leak", "device-side assert", "out of memory"]


def device_faults(check: Check, on_gpu: bool) -> dict[str, Any]:
    """A leak, a device-side assert and an out-of-memory, each followed by jobs that must not
    be harmed by it."""
    fault = "FAILURE:{}" if on_gpu else "any"
    leak_gib = 8 if on_gpu else 1  # the CPU's memory is the machine's own
    leak = check.job(f"leak {leak_gib} GiB", "gpu-leak", {"gib": leak_gib}, "SUCCESS")
    after_leak = check.job("after the leak", "gpu-memory", {}, "SUCCESS")
    check.job("device-side assert", "gpu-assert", {}, fault.format("exception"))
    check.job("after the assert", "burn", {}, "SUCCESS", duration_s=2)
    check.job("after the assert", "digits-train", {"epochs": 3}, "SUCCESS")
    blocks = {"gib": 16, "blocks": 64} if on_gpu else {"gib": 1, "blocks": 2}
    oom = check.job("out of memory", "gpu-oom", blocks, fault.format("oom"))
    check.job("after the oom", "burn", {}, "SUCCESS", duration_s=2)
    return {
        "leak": {"leaked_pid": _pid(leak), "after": after_leak.output},
        "oom_peak_gpu_bytes": oom.peak_gpu_bytes,
    }


def has_torch() -> bool:
    """Whether torch can be imported here (the workers share this environment)."""
    return importlib.util.find_spec("torch") is not None


def burst(check: Check, step: str, count: int) -> list[Run]:
    """count empty jobs submitted at once, waited for."""
    runs = [check.submit(step, "noop", {}, "SUCCESS") for _ in range(count)]
    for run in runs:
        check.wait(run, quiet=True)
    return runs


def _per_job(runs: list[Run]) -> float:
    """Seconds per job of a burst, from the first start to the last end (Redis's clock)."""
    starts = [r.started_at for r in runs if r.started_at]
    ends = [r.finished_at for r in runs if r.finished_at]
    return round((max(ends) - min(starts)) / len(runs), 4)


def _pid(run: Run) -> int | None:
    return (run.output or {}).get("pid")


def _gaps(runs: list[Run]) -> list[float]:
    """Milliseconds from each job's end to the next one's start (Redis's clock, both)."""
    times = sorted((r.started_at, r.finished_at) for r in runs if r.started_at and r.finished_at)
    return [(start - end) * 1000 for (_, end), (start, _) in itertools.pairwise(times)]


def plain_loop(device: str) -> Callable[[], float | None]:
    """The reference: the same bf16 products in a plain torch loop, in this process (None
    without torch)."""
    n = MATRIX_N if device == "cuda" else 256

    def measure() -> float | None:
        if not has_torch():
            return None
        outcome = matmul(device, n, BURN_S, should_stop=lambda: False)
        if device == "cuda":
            import torch

            torch.cuda.empty_cache()
        return float(outcome.tflops or 0.0)

    return measure


def machine(on_gpu: bool) -> dict[str, Any]:
    """The card, its driver and torch, as this process sees them."""
    if not has_torch():
        return {"torch": "not installed", "cuda": None}
    import torch

    facts: dict[str, Any] = {"torch": str(torch.__version__), "cuda": torch.version.cuda}
    if on_gpu:
        facts["card"] = torch.cuda.get_device_name(0)
        smi = shutil.which("nvidia-smi")
        if smi:
            query = [smi, "--query-gpu=driver_version,memory.total", "--format=csv,noheader"]
            facts["driver"] = subprocess.run(query, capture_output=True, text=True).stdout.strip()
    return facts


def refuses_two_devices() -> dict[str, Any]:
    """A worker told to drive two devices does not start, and says why in one line."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"}
    argv = [sys.executable, "-m", "app.worker.main"]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    return {"exit_code": run.returncode, "message": run.stderr.strip().splitlines()[-1:]}


def replacements(client: httpx.Client) -> dict[str, float]:
    """fairgpu_child_replacements_total by reason, from /metrics."""
    text = client.get("/metrics").text
    pattern = re.compile(r'^fairgpu_child_replacements_total\{reason="(\w+)"\} (\S+)$', re.M)
    return {reason: float(count) for reason, count in pattern.findall(text)}


def verdicts(results: dict[str, Any], runs: list[Run], on_gpu: bool) -> dict[str, bool]:
    """What the check requires; on a CPU only what a CPU can show."""
    billed = {r.task_id: r.billed_s or 0.0 for r in runs}
    cold, warm = (billed[results["digits"][k]] for k in ("cold", "warm"))
    wanted = {
        "every job ended as it should, billed once": all(r.ok for r in runs),
        "digits-train cold <= 2x warm (billed seconds)": cold <= 2 * warm,
        "a worker given two devices refuses to start": results["two_devices"]["exit_code"] != 0,
        **gang_verdicts(results, on_gpu),
    }
    if on_gpu:
        burns = [t for t in results["burn_tflops"] if t]
        plain = sum(results["plain_tflops"]) / len(results["plain_tflops"])
        after = results["leak"]["after"] or {}
        wanted["burn >= 95% of the plain loop"] = bool(burns) and min(burns) >= 0.95 * plain
        wanted["after the leak: a new child, under the limit"] = (
            after.get("pid") != results["leak"]["leaked_pid"]
            and after.get("allocated_bytes", 1 << 40) < LEAK_LIMIT_MB << 20
        )
        counts = results["replacements"]
        wanted["replacements counted: gpu_leak, cuda_error"] = (
            counts.get("gpu_leak", 0) >= 1 and counts.get("cuda_error", 0) >= 1
        )
    return wanted


def run_check(out: Path, on_gpu: bool, redis_port: int | None = None) -> dict[str, Any]:
    """Start the stack (its Redis on redis_port if given, else EMBEDDED_REDIS_PORT, else a free
    port), run the sequence, stop the stack; the results (with the error, when a step failed:
    what was measured until then is kept, a GPU's time being scarce)."""
    workdir = Path(tempfile.mkdtemp(prefix="fairgpu-gpu-check-"))
    settings = Settings(users_file=ROOT / "fixtures" / "users.json", job_modules=[JOB_MODULE])
    update: dict[str, object] = {"port": _free_port()}
    if redis_port is not None:
        update["embedded_redis_port"] = redis_port
    settings = settings.model_copy(update=update)
    stack = Stack(settings, use_given_redis=False, workers=0, workdir=workdir)
    results: dict[str, Any] = {"machine": machine(on_gpu), "on_gpu": on_gpu}
    results["two_devices"] = refuses_two_devices()
    check = Check(httpx.Client(base_url="http://127.0.0.1", headers={"X-API-Key": KEY}))
    began = time.monotonic()
    try:
        stack.start()
        device = {"CUDA_VISIBLE_DEVICES": "0" if on_gpu else "-1"}
        stack.start_worker("gpu0" if on_gpu else "cpu0", env=device)
        check.client = httpx.Client(base_url=stack.url, headers={"X-API-Key": KEY}, timeout=30)
        _await_worker(check.client)
        results["redis_url"] = stack.redis_url
        results |= sequence(check, on_gpu, plain_loop("cuda" if on_gpu else "cpu"))
        results["workers"] = check.client.get("/admin/queues").json().get("workers")
        results["per_job_fresh_s"] = fresh_children(stack, check.client, check, device)
        # after the CHILD_PER_JOB burst, so that its replacements (per_job) are counted too
        results["replacements"] = replacements(check.client)
        check.bills()
        results["verdicts"] = verdicts(results, check.runs, on_gpu)
    except (Exception, KeyboardInterrupt) as exc:  # keep what was measured, and where it stopped
        results["error"] = f"{type(exc).__name__}: {exc}"
        results["verdicts"] = {f"the check ran to its end ({results['error']})": False}
    finally:
        results["runs"] = [{**asdict(r), "ok": r.ok} for r in check.runs]
        results["seconds"] = round(time.monotonic() - began, 1)
        check.client.close()
        stack.stop()
        for name in ("api.log", "gpu0.log", "cpu0.log", "fresh.log"):
            if (workdir / name).exists():
                shutil.copy(workdir / name, out / name)
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def fresh_children(
    stack: Stack, client: httpx.Client, check: Check, device: dict[str, str]
) -> float:
    """CHILD_PER_JOB's cost: the first worker stops (SIGTERM), one with CHILD_PER_JOB=true runs
    a burst of empty jobs; seconds per job, to set beside the warm child's."""
    for name, process in list(stack.workers.items()):
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=WAIT_S)
        stack.workers.pop(name)
    stack.start_worker("fresh", env={**device, "CHILD_PER_JOB": "true"})
    _await_worker(client)
    return _per_job(burst(check, "CHILD_PER_JOB", FRESH_JOBS))


def _await_worker(client: httpx.Client) -> None:
    """Until the worker's heartbeat is in (its child has started and probed the device)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if any(w["alive"] for w in client.get("/admin/queues").json().get("workers", [])):
            return
        time.sleep(0.2)  # the worker imports torch and starts its child: seconds
    raise TimeoutError("the worker did not start")


def _free_port() -> int:
    from app.dev.redis_server import free_port

    return free_port()


def _say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def main() -> int:
    """Run the check (or put its results into the docs)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--cpu", action="store_true", help="a CPU worker, torch on the CPU")
    parser.add_argument("--docs", type=Path, help="a gpu_check.json to put into the docs")
    parser.add_argument(
        "--redis-port", type=int, help="port of its own Redis (default: EMBEDDED_REDIS_PORT)"
    )
    args = parser.parse_args()
    if args.docs:
        into_docs(args.docs)
        return 0
    if not args.cpu and not has_torch():
        print(TORCH_NEEDED, file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    results = run_check(args.out, on_gpu=not args.cpu, redis_port=args.redis_port)
    (args.out / "gpu_check.json").write_text(json.dumps(results, indent=2, default=str))
    (args.out / "gpu_check.md").write_text(render(results))
    print(render(results))
    return 0 if all(results["verdicts"].values()) else 1
