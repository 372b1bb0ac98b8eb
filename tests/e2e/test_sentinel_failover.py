"""Losing the Redis primary under Sentinel: a whole stack (the API, two workers, the reclaim
timer) on three Sentinels, one primary and two replicas, all real processes on loopback.
Jobs are submitted before, during and after a SIGKILL of the primary: every submit is answered
within 10 s with a 200, 429 or 503 (never a 500, never a hang; a 503 says Retry-After),
submits succeed again soon after the kill, and every job whose submit was answered 200 ends
SUCCESS, billed exactly once."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.dev.sentinels import sentinel_set
from app.dev.stack import Stack
from tests.e2e.test_jobs import status
from tests.support import DEMO_KEY, fast_settings, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
EVERY_S = 0.1  # between two submits
ANSWER_WITHIN_S = 10.0


@dataclass(frozen=True)
class Answer:
    sent_at: float
    took_s: float
    code: int
    task_id: str | None
    retry_after: str | None


def submit_every(stack: Stack, until: float, answers: list[Answer]) -> None:
    """Submit a short job every EVERY_S until `until`, recording each answer (0: none came)."""
    with httpx.Client(base_url=stack.url, headers={"X-API-Key": DEMO_KEY}) as client:
        while (sent := time.time()) < until:
            try:
                reply = client.post(
                    "/enqueue-task",
                    json={"kind": "short", "duration_s": 0.05},
                    timeout=ANSWER_WITHIN_S + 5,
                )
                code, body = reply.status_code, reply.json()
                retry = reply.headers.get("retry-after")
            except httpx.HTTPError:
                code, body, retry = 0, {}, None
            task_id = body.get("task_id") if code == 200 else None
            answers.append(Answer(sent, time.time() - sent, code, task_id, retry))
            time.sleep(max(0.0, EVERY_S - (time.time() - sent)))


def test_a_primary_killed_under_load_loses_no_accepted_job(tmp_path: Path) -> None:
    with sentinel_set(tmp_path / "redis") as ha:
        settings = fast_settings(redis_sentinels=ha.addresses, redis_url="redis://127.0.0.1/0")
        (tmp_path / "stack").mkdir()
        with Stack(settings, workers=2, workdir=tmp_path / "stack") as stack:
            answers: list[Answer] = []
            start = time.time()
            submitter = threading.Thread(
                target=submit_every, args=(stack, start + 25, answers), daemon=True
            )
            submitter.start()
            wait_for(lambda: len([a for a in answers if a.code == 200]) >= 20, what="a load")
            killed_at = time.time()
            ha.primary().kill()
            submitter.join()

            assert all(a.code in (200, 429, 503) for a in answers), sorted(
                {a.code for a in answers}
            )
            assert max(a.took_s for a in answers) < ANSWER_WITHIN_S
            assert all(a.retry_after for a in answers if a.code == 503)
            again = min(a.sent_at for a in answers if a.code == 200 and a.sent_at > killed_at)
            refused = sum(1 for a in answers if a.code == 503)
            print(
                f"submits succeeded again {again - killed_at:.2f} s after the kill; "
                f"{refused} of {len(answers)} were answered 503 meanwhile"
            )
            assert again - killed_at < 15

            accepted = [a.task_id for a in answers if a.task_id is not None]
            for task_id in accepted:
                wait_for(
                    lambda t=task_id: status(stack, DEMO_KEY, t)["status"] == "SUCCESS",
                    timeout=60,
                    what=f"job {task_id} to succeed",
                )
            bills = httpx.get(
                f"{stack.url}/billing-records?limit=1000", headers={"X-API-Key": DEMO_KEY}
            ).json()
            billed = [b["task_id"] for b in bills]
            assert sorted(billed) == sorted(accepted)  # each accepted job once, nothing else
