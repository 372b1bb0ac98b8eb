"""The dashboard's queues panel shows the fleet (app/dashboard/dashboard.js, run in Node by
tests/dashboard/page.js against a stand-in of the API): one row per host and class with its
workers, alive and busy, and a line per class of the catalog; a server before the fleet sends
none and the panel shows none. Skipped where Node is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

HARNESS = Path(__file__).parents[1] / "dashboard" / "page.js"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")
OWNER = "11111111-1111-1111-1111-111111111111"


def counts(workers: int, alive: int, busy: int) -> dict[str, int]:
    return {"workers": workers, "alive": alive, "busy": busy}


FLEET = {
    "ttl_s": 600,
    "hosts": [
        {"host": "node-a", "gpu_class": "big", "memory_gb": 80, **counts(2, 2, 1)},
        {"host": "node-b", "gpu_class": "small", "memory_gb": 24, **counts(3, 2, 0)},
    ],
    "classes": [
        {"gpu_class": "big", "memory_gb": 80, "price": 2, "hosts": 1, **counts(2, 2, 1)},
        {"gpu_class": "small", "memory_gb": 24, "price": 1, "hosts": 1, **counts(3, 2, 0)},
        {"gpu_class": "tiny", "memory_gb": 16, "price": 0.5, "hosts": 0, **counts(0, 0, 0)},
    ],
}


def shown(queues: dict[str, Any], until: list[list[str]]) -> dict[str, Any]:
    assert NODE is not None
    scenario = {
        "answers": {
            "account": {"user_id": OWNER, "description": "demo", "share": 1, "admin": True},
            "tasks": {"tasks": [], "next_cursor": None},
            "billing-records": [],
            "admin/queues": queues,
        },
        "streams": {},
        "until": until,
    }
    ran = subprocess.run(
        [NODE, str(HARNESS)], input=json.dumps(scenario), capture_output=True, text=True, timeout=30
    )
    assert ran.returncode == 0, ran.stderr
    seen: dict[str, Any] = json.loads(ran.stdout)
    assert seen["waited"], seen
    return seen


def test_the_fleet_shows_each_host_and_class_and_each_class_of_the_catalog() -> None:
    seen = shown(
        {"queues": [], "workers": [], "fleet": FLEET}, [["fleet:node-b/small", "busy", "0"]]
    )
    big = seen["fleet"]["node-a/big"]
    assert (big["host"], big["class"], big["memory"]) == ("node-a", "big", "80 GB")
    assert (big["workers"], big["alive"], big["busy"]) == ("2", "2", "1")
    assert seen["fleetClasses"] == (
        "big (80 GB, price 2): 2 workers, 2 alive, 1 busy · "
        "small (24 GB, price 1): 3 workers, 2 alive, 0 busy · "
        "tiny (16 GB, price 0.5): 0 workers, 0 alive, 0 busy"
    )


def test_a_server_before_the_fleet_shows_none() -> None:
    long = {
        "name": "long",
        "queued": 0,
        "held_by_limit": 0,
        "in_flight": 0,
        "workers": 1,
        "fairness_lag_s": 0.0,
        "top_accounts": [],
        "stats": {},
    }
    seen = shown({"queues": [long], "workers": []}, [["queue:long", "workers", "1"]])
    assert (seen["fleet"], seen["fleetClasses"]) == ({}, "")
