"""API_WORKERS: several API processes on one port, each serving requests and streams alone."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import DEMO_KEY, wait_for
from tests.e2e.test_jobs import streamed, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def api_processes(supervisor: int) -> set[int]:
    """The pids of the API processes that uvicorn's supervisor (pid) has started."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if ppid == supervisor and b"spawn_main" in command:
            found.add(int(stat.parent.name))
    return found


@contextlib.contextmanager
def only(serving: int, pids: set[int]) -> Iterator[None]:
    """Every new connection goes to `serving` while the block runs: the others are stopped.
    uvicorn's supervisor replaces a process that does not answer its ping for 5 s, which on a
    busy machine may happen to a stopped one meanwhile: one gone is left alone."""
    others = pids - {serving}
    for pid in others:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in others:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def in_turn(supervisor: int) -> Iterator[tuple[int, set[int]]]:
    """Each of the two API processes in turn, with the processes there are at its turn: read
    again each time, since a stopped one may have been replaced meanwhile (see only)."""
    served: set[int] = set()
    while len(served) < 2:
        pids = wait_for(
            lambda: found if len(found := api_processes(supervisor)) == 2 else None,
            what="two API processes",
        )
        serving = min(pids - served)
        yield serving, pids
        served.add(serving)


def statuses(stack: Stack, task_id: str) -> list[object]:
    """The statuses a fresh connection's event stream of the job carries, until it ends."""
    return [event["status"] for event in streamed(stack, DEMO_KEY, task_id)]


def two_api_processes(make_stack: Callable[..., Stack]) -> tuple[Stack, int, set[int]]:
    """A stack with API_WORKERS=2: the stack, uvicorn's supervisor and its two processes."""
    stack = make_stack(workers=1, api_workers=2)
    assert stack.api is not None
    supervisor = stack.api.pid
    pids = wait_for(
        lambda: found if len(found := api_processes(supervisor)) == 2 else None,
        what="two API processes",
    )
    return stack, supervisor, pids


def test_each_api_process_serves_jobs_and_their_streams_on_its_own(
    make_stack: Callable[..., Stack],
) -> None:
    stack, supervisor, _ = two_api_processes(make_stack)
    for serving, pids in in_turn(supervisor):
        with only(serving, pids):
            task_id = submit(stack, DEMO_KEY, duration_s=0.2)
            # The worker's changes reach this process through its own subscription.
            assert statuses(stack, task_id) == ["PENDING", "STARTED", "SUCCESS"]


def test_an_api_process_that_dies_is_replaced(make_stack: Callable[..., Stack]) -> None:
    stack, supervisor, first = two_api_processes(make_stack)
    killed = min(first)
    os.kill(killed, signal.SIGKILL)

    after = wait_for(
        lambda: (
            found if len(found := api_processes(supervisor)) == 2 and killed not in found else None
        ),
        what="a new API process in place of the killed one",
    )
    assert after & first == first - {killed}
    task_id = submit(stack, DEMO_KEY, duration_s=0.1)
    assert statuses(stack, task_id)[-1] == "SUCCESS"
    # The default ACCESS_LOG=false holds in every API process, not only in a single one.
    log = (stack.log_dir / "api.log").read_text()
    assert "POST /enqueue-task" not in log


def test_a_key_revoked_through_one_api_process_is_refused_by_every_one(
    make_stack: Callable[..., Stack],
) -> None:
    stack, supervisor, _ = two_api_processes(make_stack)
    admin = {"X-API-Key": DEMO_KEY}  # the demo account is an admin
    made = httpx.post(f"{stack.url}/admin/accounts", headers=admin, json={"user_id": "fay"})
    assert made.status_code == 201, made.text
    issued = httpx.post(f"{stack.url}/admin/accounts/fay/keys", headers=admin)
    assert issued.status_code == 201, issued.text
    key = issued.json()["key"]

    def answers_in_each(code: int) -> dict[int, float]:
        """Per API process: the seconds until it answers `code` to the key."""
        seen: dict[int, float] = {}
        began = time.monotonic()
        for serving, pids in in_turn(supervisor):
            with only(serving, pids):
                wait_for(lambda: account_status(stack, key) == code, what=f"{code} from {serving}")
                seen[serving] = time.monotonic() - began
        return seen

    answers_in_each(200)  # both processes know the new key
    key_id = httpx.get(f"{stack.url}/admin/accounts/fay/keys", headers=admin).json()[0]["id"]
    assert httpx.delete(f"{stack.url}/admin/keys/{key_id}", headers=admin).status_code == 200
    refused = answers_in_each(401)
    # Reported, not asserted (timing on a shared machine): the issue asks for within a second.
    print("revoked key refused after " + ", ".join(f"{s:.2f} s" for s in refused.values()))


def account_status(stack: Stack, key: str) -> int:
    """GET /account with the key, on a fresh connection (so that either process may take it)."""
    with httpx.Client(base_url=stack.url, headers={"X-API-Key": key}) as client:
        return client.get("/account", timeout=10).status_code
