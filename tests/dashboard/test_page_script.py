"""The dashboard's script run in Node (tests/dashboard/page.js) against a stand-in of the API:
what a job's row shows when its run is preempted (the stream's `event: preempted`, its runs
and its time as its bill counts them) and when its account's limit holds it back, and what the
queues panel says of jobs a limit holds. Skipped where Node is missing; the real browser's
tests are in tests/e2e/test_dashboard.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

HARNESS = Path(__file__).with_name("page.js")
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

OWNER = "11111111-1111-1111-1111-111111111111"
TASK = "0b7d2a4e-6c1f-4b8e-9d2a-3f5e6a7b8c13"
HELD = "0b7d2a4e-6c1f-4b8e-9d2a-3f5e6a7b8c14"
NOW = 1_800_000_000.0


def status(task_id: str, how: str, **fields: Any) -> dict[str, Any]:
    base = {
        "task_id": task_id,
        "status": how,
        "kind": "long",
        "type": "digits-train",
        "attempts": 1,
        "preemptions": 0,
        "runs": 1,
        "ran_s": 0.0,
        "enqueued_at": NOW,
        "result": None,
    }
    return base | fields


def events(*pairs: tuple[str | None, dict[str, Any]]) -> str:
    """An event-stream body: each (name or None for a status, data)."""
    text = ""
    for i, (name, data) in enumerate(pairs):
        text += f"id: {i + 1}-0\n" + (f"event: {name}\n" if name else "")
        text += f"data: {json.dumps(data)}\n\n"
    return text


def shown(scenario: dict[str, Any]) -> dict[str, Any]:
    assert NODE is not None
    ran = subprocess.run(
        [NODE, str(HARNESS)], input=json.dumps(scenario), capture_output=True, text=True, timeout=30
    )
    assert ran.returncode == 0, ran.stderr
    seen: dict[str, Any] = json.loads(ran.stdout)
    assert seen["waited"], seen  # every cell the scenario waits for showed its text
    return seen


def scenario(
    tasks: list[dict[str, Any]], streams: dict[str, str], until: list[list[str]]
) -> dict[str, Any]:
    queues = {
        "name": "long",
        "queued": 3,
        "held_by_limit": 2,
        "in_flight": 1,
        "workers": 2,
        "fairness_lag_s": 0.0,
        "top_accounts": [{"user_id": OWNER, "queued": 3, "held_by_limit": 2}],
        "stats": {},
    }
    return {
        "answers": {
            "account": {"user_id": OWNER, "description": "demo", "share": 1, "admin": True},
            "tasks": {"tasks": tasks, "next_cursor": None},
            "billing-records": [],
            "admin/queues": {"queues": [queues], "workers": []},
        },
        "streams": streams,
        "until": until,
    }


def test_a_preempted_run_shows_in_its_row_live_with_its_runs_and_time() -> None:
    """The stream's `event: preempted` is taken, not dropped: the row says the job was
    preempted and resumes, counts its run, and shows the seconds it ran so far (5.1 s)."""
    running = status(
        TASK,
        "STARTED",
        result={
            "worker": "gpu0@a",
            "gpu_id": 0,
            "duration_s": 60,
            "enqueued_at": NOW,
            "started_at": NOW + 1,
        },
    )
    waiting = status(
        TASK,
        "PENDING",
        preemptions=1,
        runs=1,
        ran_s=5.068,
        position=0,
        waiting_for="gpu",
        estimated_start_at=None,
    )
    stream = events(
        (None, running),
        ("preempted", {"preemptions": 1, "seconds": 5.068, "ran_s": 5.068}),
        (None, waiting),
    )
    seen = shown(scenario([running], {TASK: stream}, [[TASK, "preempted", "1"]]))
    row = seen["rows"][TASK]
    assert row["preempted"] == "1 · resumes"
    assert "yielded its GPU once" in row["title:preempted"]
    assert (row["runs"], row["ran"]) == ("1", "5.1 s so far")
    assert row["place"] == "next · waiting for a GPU"


def test_an_ended_preempted_job_shows_all_its_runs_as_its_bill_counts_them() -> None:
    ended = status(
        TASK,
        "SUCCESS",
        attempts=2,
        preemptions=1,
        runs=2,
        ran_s=20.068,
        result={
            "worker": "gpu0@a",
            "gpu_id": 0,
            "duration_s": 60,
            "enqueued_at": NOW,
            "started_at": NOW + 10,
            "finished_at": NOW + 25,
        },
    )
    seen = shown(scenario([ended], {}, [[TASK, "runs", "2"]]))
    row = seen["rows"][TASK]
    assert (row["ran"], row["runs"], row["preempted"]) == ("20 s", "2", "1")  # not the last 15 s


def test_a_job_held_by_its_accounts_limit_says_so_and_the_queues_count_it() -> None:
    held = status(
        HELD,
        "PENDING",
        attempts=0,
        runs=0,
        position=1,
        waiting_for="account_limit",
        estimated_start_at=None,
    )
    seen = shown(scenario([held], {}, [[HELD, "place", "limit"], ["queue:long", "held", "2"]]))
    assert seen["rows"][HELD]["place"] == "1 ahead · held by your account's limit"
    assert seen["rows"][HELD]["runs"] == ""
    long = seen["queues"]["long"]
    assert (long["queued"], long["held"]) == ("3", "2")
    assert long["top"] == "11111111: 3 (2 held)"
