"""A key revoked through one API process ends the key's stream open on another (API_WORKERS=2,
real processes): the serving process hears of it only through Redis."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from app.api.routes.stream import REVOKED
from app.auth import digest
from app.dev.stack import Stack
from tests.e2e.conftest import DEMO_KEY, wait_for
from tests.e2e.test_api_workers import account_status, api_processes, only
from tests.e2e.test_jobs import submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
ADMIN = {"X-API-Key": DEMO_KEY}  # the demo account is an admin


def events(lines: Iterator[str], within_s: float = 30.0) -> Iterator[tuple[str, dict[str, object]]]:
    """The (name, data) of each event among a stream's lines; the stream must end within_s
    (its keep-alive comments are lines too, so a stream that goes on is noticed)."""
    deadline = time.monotonic() + within_s
    name, data = "message", ""
    for line in lines:
        assert time.monotonic() < deadline, f"the stream went on for {within_s:g} s"
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data = line.removeprefix("data:").strip()
        elif not line and data:
            yield name, json.loads(data)
            name, data = "message", ""


def test_a_key_revoked_through_one_api_process_ends_its_stream_on_the_other(
    make_stack: Callable[..., Stack],
) -> None:
    # No worker: the job stays queued. Keep-alives every second: a stream that goes on is seen.
    stack = make_stack(workers=0, api_workers=2, sse_keepalive_s=1)
    assert stack.api is not None
    supervisor = stack.api.pid
    pids = wait_for(
        lambda: found if len(found := api_processes(supervisor)) == 2 else None,
        what="two API processes",
    )
    made = httpx.post(f"{stack.url}/admin/accounts", headers=ADMIN, json={"user_id": "fay"})
    assert made.status_code == 201, made.text
    key = httpx.post(f"{stack.url}/admin/accounts/fay/keys", headers=ADMIN).json()["key"]
    streaming, revoking = sorted(pids)
    for pid in pids:  # each process knows the new key
        with only(pid, pids):
            wait_for(lambda: account_status(stack, key) == 200, what=f"the key known to {pid}")
    task_id = submit(stack, key, duration_s=5)

    url = f"{stack.url}/task-status/stream/{task_id}"
    with contextlib.ExitStack() as opened:
        with only(streaming, pids):
            response = opened.enter_context(
                httpx.stream("GET", url, headers={"X-API-Key": key}, timeout=30)
            )
        assert response.status_code == 200
        seen = events(response.iter_lines())
        assert next(seen)[1]["status"] == "PENDING"
        with only(revoking, pids):
            gone = httpx.delete(f"{stack.url}/admin/keys/{digest(key)[:16]}", headers=ADMIN)
            assert gone.status_code == 200, gone.text
        assert list(seen) == [("error", {"detail": REVOKED})]  # and then the stream ended
