"""Jobs of several cards with real processes (issue 42): an API and CPU workers acting as the
cards of simulated hosts. A 2-card job runs in one process on two cards of one host, its
result naming both, billed once for both; amid a saturating stream of one-card jobs its cards
are kept for it and it starts before the stream ends, while the freed card runs only what ends
before; a worker killed while its card is lent leaves no card held; a job no host can hold is
refused at submit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import DEMO_KEY, ended, job, post_job, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def submit(stack: Stack, duration_s: float, gpus: int = 1) -> str:
    body: dict[str, Any] = {"type": "burn", "duration_s": duration_s, "kind": "short"}
    if gpus > 1:
        body = {"type": "ddp-burn", "duration_s": duration_s, "gpus": gpus}
    reply = post_job(stack, body)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["task_id"])


def cards(stack: Stack, host: str, names: list[str]) -> None:
    for name in names:
        stack.start_worker(name, env={"WORKER_HOST": host})
    stack.wait_for_workers()


def test_a_two_card_job_runs_once_on_two_cards_of_one_host(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(0)
    cards(stack, "node-a", ["card0", "card1"])
    cards(stack, "node-b", ["card2"])

    refused = post_job(stack, {"type": "ddp-burn", "duration_s": 0.5, "gpus": 3})
    assert refused.status_code == 422, refused.text
    assert "gpus" in refused.text  # no host has three cards

    task_id = submit(stack, 0.5, gpus=2)
    state = ended(stack, task_id)
    assert state["status"] == "SUCCESS", state
    result = state["result"]
    assert result["host"] == "node-a"
    devices = result["devices"]
    assert len(devices) == 2 and len({d["worker"] for d in devices}) == 2
    assert result["worker"] == devices[0]["worker"]
    assert result["output"]["devices"] == 2  # one process saw both
    assert state["gpus"] == 2

    def billed() -> list[dict[str, Any]] | None:
        reply = httpx.get(f"{stack.url}/billing-records", headers={"X-API-Key": DEMO_KEY})
        return [b for b in reply.json() if b["task_id"] == task_id] or None

    mine = wait_for(billed, 30, "the job's bill")
    assert len(mine) == 1 and mine[0]["gpus"] == 2
    assert mine[0]["billed_seconds"] >= 2 * 0.5  # both cards, each at least its duration


def test_a_stream_of_one_card_jobs_does_not_starve_a_two_card_job(
    make_stack: Callable[..., Stack],
) -> None:
    """Both cards of the host run a stream of 3 s jobs; the 2-card job submitted meanwhile
    starts before the stream's later jobs, and no stream job starts on its cards between its
    turn and its start unless it ended first (none of 3 s fits)."""
    stack = make_stack(0)
    cards(stack, "node-a", ["card0", "card1"])
    stream = [submit(stack, 3.0) for _ in range(2)]
    wait_for(lambda: all(job(stack, s)["status"] == "STARTED" for s in stream), 60, "both run")
    pair = submit(stack, 0.5, gpus=2)
    stream += [submit(stack, 3.0) for _ in range(4)]
    waiting = wait_for(
        lambda: (s := job(stack, pair))["reservation"] is not None and s,
        30,
        "the 2-card job says which cards are kept for it",
    )
    assert waiting["waiting_for"] == "gpu" and waiting["status"] == "PENDING", waiting
    assert waiting["reservation"]["host"] == "node-a"
    done = ended(stack, pair)
    assert done["status"] == "SUCCESS", done
    later = [ended(stack, s) for s in stream[2:]]
    started = done["result"]["started_at"]
    assert all(s["result"]["started_at"] >= started for s in later), "the stream passed it"


def test_a_lender_killed_mid_job_leaves_no_card_held(make_stack: Callable[..., Stack]) -> None:
    """The worker whose card is lent dies while the job runs: the job's lease is reclaimed
    with every card, the job runs again once the host has two live cards, and succeeds."""
    stack = make_stack(0)
    cards(stack, "node-a", ["card0", "card1"])
    pair = submit(stack, 4.0, gpus=2)
    running = wait_for(
        lambda: (s := job(stack, pair))["status"] == "STARTED" and s, 60, "the pair runs"
    )
    lender = next(d["worker"] for d in running["result"]["devices"][1:])
    name = lender.split("@", 1)[0]
    stack.kill_worker(name)
    stack.start_worker(name, env={"WORKER_HOST": "node-a"})
    done = ended(stack, pair)
    assert done["status"] == "SUCCESS", done
    one = submit(stack, 0.1)
    assert ended(stack, one)["status"] == "SUCCESS"  # no card is left held
