"""A clean GPU for every job, through real processes: the API and a worker whose device is the
pretend one of tests.jobs.device (DEVICE_PROBE), so that what happens on a real GPU (a sticky
error, a leak, out of memory, a card gone for good) is checked here without one. The GPU itself
is checked by scripts/gpu_check.py."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import DEMO_KEY, wait_for
from tests.e2e.test_jobs import bills, finished, status

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
MODULES = ["tests.jobs.device", "tests.jobs.sample"]
HEADERS = {"X-API-Key": DEMO_KEY}  # the demo account is an admin too


def submit(stack: Stack, type_: str, inp: dict[str, Any] | None = None) -> str:
    body = {"type": type_, "input": inp or {}}
    reply = httpx.post(f"{stack.url}/enqueue-task", headers=HEADERS, json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["task_id"])


def ended(stack: Stack, task_id: str) -> dict[str, Any]:
    return wait_for(lambda: finished(stack, DEMO_KEY, task_id), what=f"the end of {task_id}")


def replacements(stack: Stack) -> dict[str, float]:
    text = httpx.get(f"{stack.url}/metrics", timeout=10).text
    found = re.findall(r'^fairgpu_child_replacements_total\{reason="(\w+)"\} (\S+)$', text, re.M)
    return {reason: float(count) for reason, count in found}


def workers(stack: Stack) -> list[dict[str, Any]]:
    reply = httpx.get(f"{stack.url}/admin/queues", headers=HEADERS, timeout=10)
    assert reply.status_code == 200, reply.text
    return list(reply.json()["workers"])


def pretend_gpu_stack(
    make_stack: Callable[..., Stack], marker: Path, **settings: object
) -> tuple[Stack, str]:
    """A stack of the API and one worker on the pretend device; the worker's short name."""
    stack = make_stack(workers=0, job_modules=MODULES, **settings)
    env = {"DEVICE_PROBE": "tests.jobs.device:probe", "FAIRGPU_TEST_DEVICE_MARKER": str(marker)}
    stack.start_worker("gpu0", env=env)
    return stack, "gpu0"


def test_faults_and_leaks_cost_a_child_never_a_later_job(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    stack, _ = pretend_gpu_stack(make_stack, tmp_path / "marker")
    first = ended(stack, submit(stack, "device-memory"))["result"]["output"]

    broke = ended(stack, submit(stack, "device-assert"))
    assert (broke["status"], broke["error_kind"]) == ("FAILURE", "exception")
    assert "device-side assert triggered" in broke["error"]
    after = ended(stack, submit(stack, "device-memory"))
    assert after["status"] == "SUCCESS"  # no later job sees the broken device
    assert after["result"]["output"]["pid"] != first["pid"]

    leaked = ended(stack, submit(stack, "device-leak", {"mb": 300}))
    assert leaked["status"] == "SUCCESS"
    clean = ended(stack, submit(stack, "device-memory"))["result"]["output"]
    assert clean["held"] == 0
    assert clean["pid"] != leaked["result"]["output"]["pid"]

    oom = ended(stack, submit(stack, "device-oom", {"mb": 150_000}))
    assert (oom["status"], oom["error_kind"]) == ("FAILURE", "oom")
    assert oom["result"]["peak_gpu_memory_bytes"] == 150_000 << 20

    counted = replacements(stack)
    assert (counted["cuda_error"], counted["gpu_leak"], counted["crash"]) == (1, 1, 0)
    assert {b["task_id"] for b in bills(stack, DEMO_KEY)} >= {broke["task_id"], oom["task_id"]}


def test_a_setup_that_fails_ends_its_job_setup_unbilled(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    stack, _ = pretend_gpu_stack(make_stack, tmp_path / "marker")
    failed = ended(stack, submit(stack, "broken-setup"))
    assert (failed["status"], failed["error_kind"]) == ("FAILURE", "setup")
    assert "the model's weights are not where setup() looks" in failed["error"]
    assert ended(stack, submit(stack, "echo", {"text": "next"}))["status"] == "SUCCESS"
    assert failed["task_id"] not in {b["task_id"] for b in bills(stack, DEMO_KEY)}


def test_a_device_broken_for_good_stops_its_worker_which_says_so_and_loses_nothing(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    stack, name = pretend_gpu_stack(make_stack, marker)
    broke = ended(stack, submit(stack, "device-assert", {"for_good": True}))
    assert (broke["status"], broke["error_kind"]) == ("FAILURE", "exception")
    worker = stack.workers[name]
    assert worker.wait(timeout=60) == 1
    last = (stack.log_dir / f"{name}.log").read_text().strip().splitlines()[-1]
    assert last == (
        "fairgpu worker stopped: its device is unusable: the device failed a fresh job "
        "child's probe: CUDA error: the device fell off the bus"
    )
    [seen] = workers(stack)
    assert seen["name"].startswith(f"{name}@")
    assert (seen["alive"], seen["broken"]) == (False, last.removeprefix("fairgpu worker stopped: "))
    metrics = httpx.get(f"{stack.url}/metrics", timeout=10).text
    assert re.search(rf'^fairgpu_worker_broken{{worker="{seen["name"]}"}} 1\.0$', metrics, re.M)

    waiting = submit(stack, "echo", {"text": "waits for a good worker"})
    assert status(stack, DEMO_KEY, waiting)["status"] == "PENDING"
    marker.unlink()  # the card is replaced; a worker starts on it
    stack.start_worker("gpu1")
    assert ended(stack, waiting)["status"] == "SUCCESS"


def test_a_worker_holding_a_job_when_its_device_is_found_broken_hands_it_back(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    stack, name = pretend_gpu_stack(make_stack, marker, child_max_jobs=1)
    # the job ends well, the card goes, and the fresh child (CHILD_MAX_JOBS=1) finds it gone
    # only when the next job is in hand: a replacement for max_jobs is not awaited
    assert ended(stack, submit(stack, "device-unplug"))["status"] == "SUCCESS"
    task_id = submit(stack, "echo", {"text": "handed back"})
    assert stack.workers[name].wait(timeout=60) == 1
    back = wait_for(lambda: (s := status(stack, DEMO_KEY, task_id))["status"] == "PENDING" and s)
    assert back["attempts"] == 0  # the run that never began is not an attempt
    marker.unlink()
    stack.start_worker("gpu1")
    done = ended(stack, task_id)
    assert (done["status"], done["attempts"]) == ("SUCCESS", 1)
    assert [b["task_id"] for b in bills(stack, DEMO_KEY)].count(task_id) == 1


def test_child_per_job_gives_every_job_a_fresh_child(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    stack, _ = pretend_gpu_stack(make_stack, tmp_path / "marker", child_per_job=True)
    pids = {ended(stack, submit(stack, "device-memory"))["result"]["output"]["pid"] for _ in "abc"}
    assert len(pids) == 3
    assert replacements(stack)["per_job"] == 3
