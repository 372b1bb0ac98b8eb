"""The fleet of real worker processes, as an operator sees it in GET /admin/queues: each worker
says its host and class (WORKER_HOST, WORKER_GPU_CLASS) in its heartbeat; a worker that dies
without a goodbye keeps its place in the fleet, no longer alive, and so does one stopped on
purpose (a host that restarts keeps its cards for FLEET_TTL_S)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import DEMO_KEY, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
CATALOG = json.dumps(
    {"big": {"memory_gb": 80, "price": 2.0}, "small": {"memory_gb": 24, "price": 1.0}}
)
WORKERS = {"big0": ("big", "node-a"), "small0": ("small", "node-a"), "small1": ("small", "node-b")}


def fleet_of(stack: Stack) -> dict[str, Any]:
    reply = httpx.get(f"{stack.url}/admin/queues", headers={"X-API-Key": DEMO_KEY}, timeout=10)
    assert reply.status_code == 200, reply.text
    fleet: dict[str, Any] = reply.json()["fleet"]
    return fleet


def by_host(fleet: dict[str, Any]) -> dict[tuple[str, str], tuple[int, int]]:
    return {(h["host"], h["gpu_class"]): (h["workers"], h["alive"]) for h in fleet["hosts"]}


def test_real_workers_make_the_fleet_by_host_and_class(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(0, gpu_classes=CATALOG)
    for name, (gpu_class, host) in WORKERS.items():
        stack.start_worker(name, env={"WORKER_GPU_CLASS": gpu_class, "WORKER_HOST": host})
    stack.wait_for_workers()
    everyone = {("node-a", "big"): (1, 1), ("node-a", "small"): (1, 1), ("node-b", "small"): (1, 1)}
    wait_for(lambda: by_host(fleet_of(stack)) == everyone, 30, "the three workers in the fleet")
    classes = {
        c["gpu_class"]: (c["hosts"], c["workers"], c["price"]) for c in fleet_of(stack)["classes"]
    }
    assert classes == {"big": (1, 1, 2.0), "small": (2, 2, 1.0)}

    stack.kill_worker("small1")  # dies without a goodbye: keeps its place, not alive
    gone = {**everyone, ("node-b", "small"): (1, 0)}
    wait_for(lambda: by_host(fleet_of(stack)) == gone, 30, "the killed worker silent")
    stack.workers["small0"].terminate()  # stopped on purpose (SIGTERM): keeps its place
    stack.workers["small0"].wait(timeout=60)
    kept = {**gone, ("node-a", "small"): (1, 0)}
    wait_for(lambda: by_host(fleet_of(stack)) == kept, 30, "the stopped worker not alive")
