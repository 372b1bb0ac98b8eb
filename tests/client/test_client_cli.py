"""The `fairgpu` client commands against the real API: the app with its lifespan, served by
uvicorn in a thread on the suite's Redis, spoken to over HTTP. Jobs are moved along by the API
tests' worker stand-in (tests/api/helpers.py), so every state is reached without waiting.

One uvicorn server serves the whole module (starting and stopping one took about 0.3 s a test,
most of it uvicorn's own pauses); each test still has an app of its own with its own lifespan,
run in the server's event loop on that test's empty Redis, and the server forwards to it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from typer.testing import CliRunner, Result

from app.client.cli import cli
from app.client.words import eta, place, span
from app.dev.processes import wait_until
from app.dev.redis_server import free_port
from app.settings import Settings
from tests.api.conftest import APPS, hub_listening, running
from tests.api.helpers import OWNER, SECOND, USERS_FILE, WAIT_S, Worker

DEMO = "default_api_key"  # account 1111..., an admin
OTHER = "second_api_key"  # account 2222..., not an admin


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, users_file=USERS_FILE)


class Server:
    """uvicorn on a free port of 127.0.0.1, in a thread with its own event loop, forwarding
    every request to the app of the test at hand (`serving`)."""

    def __init__(self) -> None:
        self.app: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the thread's, once it runs
        self.config = uvicorn.Config(
            self._forward,
            interface="asgi3",  # a bound method: uvicorn would take it for ASGI 2
            host="127.0.0.1",
            port=free_port(),
            loop="none",  # the thread's own loop, which the tests' apps run in too
            ws="none",
            lifespan="off",  # each app's lifespan is run by `serving`, not by uvicorn
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=5,
        )
        self.uvicorn = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self._run, name="api", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.config.port}"

    def _run(self) -> None:
        # asyncio.Runner, as asyncio.run, cancels what is left at the end (sse-starlette
        # leaves a watcher task behind).
        with asyncio.Runner() as runner:
            self.loop = runner.get_loop()
            runner.run(self.uvicorn.serve())

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.app is not None, "no app is open: use the `url` fixture"
        await self.app(scope, receive, send)

    def start(self) -> None:
        self.thread.start()
        wait_until(
            lambda: self.uvicorn.started or not self.thread.is_alive(),
            15,
            "the API to start",
            every=0.005,
        )
        assert self.uvicorn.started, "the API did not start"

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(15)
        assert not self.thread.is_alive(), "the API did not stop"

    def serving(self, settings: Settings) -> Iterator[str]:
        """An app for these settings (lent by the API tests' APPS), its lifespan running in the
        server's loop, behind the server while the caller holds it; the lifespan must end
        within WAIT_S afterwards."""
        assert self.loop is not None, "the server is not running"
        opened: Future[None] = Future()
        done = asyncio.Event()
        with APPS.lend(settings) as app:

            async def hold() -> None:
                async with running(app):
                    await hub_listening(app.state.runtime)
                    opened.set_result(None)
                    await done.wait()

            held = asyncio.run_coroutine_threadsafe(hold(), self.loop)
            wait([opened, held], WAIT_S, return_when=FIRST_COMPLETED)
            if held.done():
                held.result()  # the start-up's own error
            opened.result(0)  # TimeoutError: not started within WAIT_S
            self.app = app
            try:
                yield self.url
            finally:
                self.app = None
                self.loop.call_soon_threadsafe(done.set)
                held.result(WAIT_S)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    started = Server()
    started.start()
    yield started
    started.stop()


@pytest.fixture
def url(server: Server, settings: Settings) -> Iterator[str]:
    """The real API, with its lifespan, listening on a free port of 127.0.0.1."""
    yield from server.serving(settings)


@pytest.fixture
def worker(settings: Settings) -> Iterator[Worker]:
    opened = Worker.open(settings)
    yield opened
    opened.close()


def fairgpu(
    url: str, *args: str, key: str | None = DEMO, env: dict[str, str] | None = None
) -> Result:
    """Run `fairgpu ARGS --url URL [--key KEY]`, with FAIRGPU_* unset unless `env` sets them, and
    a wide terminal so that tables keep whole task ids."""
    options = ["--url", url] if url else []
    if key is not None:
        options += ["--key", key]
    clean: dict[str, str | None] = {"FAIRGPU_URL": None, "FAIRGPU_API_KEY": None, "COLUMNS": "200"}
    return CliRunner().invoke(cli, [*args, *options], env={**clean, **(env or {})})


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    assert result.stderr == ""
    return result.stdout


def one_error_line(result: Result, code: int = 1) -> str:
    """The command failed with `code`, printing nothing but one line on stderr."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def submit(url: str, kind: str = "short", duration: str = "5", key: str = DEMO) -> str:
    task_id: str = json.loads(ok(fairgpu(url, "submit", kind, duration, "--json", key=key)))[
        "task_id"
    ]
    return task_id


def as_json(result: Result) -> Any:
    return json.loads(ok(result))


# -- submit, status -------------------------------------------------------------------------------
def test_submit_prints_the_task_and_status_shows_its_place_in_line(url: str) -> None:
    first = submit(url)
    out = ok(fairgpu(url, "submit", "long", "120"))
    assert out.startswith("Submitted ")
    second = out.split()[1]
    assert "(long, 2 min 0 s)" in out
    assert f"fairgpu watch {second}" in out

    table = ok(fairgpu(url, "status", first))
    assert first in table
    assert "PENDING" in table
    assert "next in line" in table
    state = as_json(fairgpu(url, "status", second, "--json"))
    assert state["task_id"] == second
    assert state["status"] == "PENDING"
    assert state["kind"] == "long"
    assert state["position"] == 0


def test_submit_with_an_idempotency_key_returns_the_same_task(url: str) -> None:
    args = ["submit", "short", "3", "--idempotency-key", "nightly-1", "--json"]
    first = as_json(fairgpu(url, *args))
    assert as_json(fairgpu(url, *args)) == first


def test_the_url_and_key_come_from_the_environment(url: str) -> None:
    env = {"FAIRGPU_URL": url, "FAIRGPU_API_KEY": DEMO}
    task_id = json.loads(ok(fairgpu("", "submit", "short", "1", "--json", key=None, env=env)))[
        "task_id"
    ]
    assert task_id in ok(fairgpu("", "status", task_id, key=None, env=env))
    # An option wins over its variable.
    wrong = {"FAIRGPU_URL": url, "FAIRGPU_API_KEY": "wrong"}
    assert ok(fairgpu("", "status", task_id, key=DEMO, env=wrong))


def test_status_of_a_finished_job_shows_its_worker_and_cost(url: str, worker: Worker) -> None:
    task_id = submit(url, duration="4")
    worker.run(task_id)
    table = ok(fairgpu(url, "status", task_id))
    assert "SUCCESS" in table
    assert "cpu@test, GPU 0" in table
    assert "2.00 (4 GPU-s, " in table  # 4 s at the default 0.5 a second
    state = as_json(fairgpu(url, "status", task_id, "--json"))
    assert state["result"]["worker"] == "cpu@test"


# -- errors ---------------------------------------------------------------------------------------
def test_a_wrong_key_is_one_line(url: str) -> None:
    line = one_error_line(fairgpu(url, "billing", key="wrong"))
    assert line == (
        f"fairgpu: 401 missing or invalid API key (header X-API-Key) at {url}/billing-records"
    )


def test_an_unknown_task_is_one_line(url: str) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    line = one_error_line(fairgpu(url, "status", unknown))
    assert line == f"fairgpu: 404 task not found at {url}/task-status/{unknown}"
    assert one_error_line(fairgpu(url, "status", unknown, "--json")) == line  # scripts too
    # Another account's job is the same 404.
    mine = submit(url)
    assert "404 task not found" in one_error_line(fairgpu(url, "watch", mine, key=OTHER))


def test_an_invalid_job_is_one_line(url: str) -> None:
    line = one_error_line(fairgpu(url, "submit", "short", "61"))
    assert (
        line == f"fairgpu: 422 duration_s must be at most 60 for a short job at {url}/enqueue-task"
    )
    line = one_error_line(fairgpu(url, "submit", "short", "0"))
    assert line.startswith("fairgpu: 422 duration_s: ")
    assert "greater than 0" in line


def test_an_unreachable_server_is_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    line = one_error_line(fairgpu(url, "tasks"))
    assert line == f"fairgpu: cannot reach {url}: connection refused"


def test_usage_errors_are_one_line_with_exit_code_2(url: str) -> None:
    assert one_error_line(fairgpu(url, "status", "x", key=None), 2) == (
        "fairgpu: no API key: pass --key or set FAIRGPU_API_KEY"
    )
    line = one_error_line(fairgpu(url, "submit", "medium", "2"), 2)
    assert line.startswith("fairgpu submit: ")
    assert "'medium' is not one of 'short', 'long'" in line
    line = one_error_line(fairgpu(url, "tasks", "--limit", "500"), 2)
    assert line.startswith("fairgpu tasks: ")
    assert one_error_line(fairgpu("ftp://host", "tasks"), 2).startswith(
        "fairgpu: invalid server URL 'ftp://host'"
    )


# -- watch ----------------------------------------------------------------------------------------
def test_watch_follows_a_job_to_its_end_with_its_result_and_cost(url: str, worker: Worker) -> None:
    task_id = submit(url, duration="2")
    worker.run(task_id)
    out = ok(fairgpu(url, "watch", task_id))
    changes = [line.split()[1] for line in out.splitlines()[:3]]
    assert changes == ["PENDING", "STARTED", "SUCCESS"]
    assert "on cpu@test, GPU 0" in out
    assert "1.00 (2 GPU-s, " in out  # the bill: 2 s at 0.5

    lines = ok(fairgpu(url, "watch", task_id, "--json")).splitlines()
    statuses = [json.loads(line)["status"] for line in lines]
    assert statuses == ["PENDING", "STARTED", "SUCCESS"]


def test_watch_of_a_failed_job_exits_3(url: str, worker: Worker) -> None:
    task_id = submit(url)
    token = worker.lease()
    worker.start(task_id, token)
    # Text from the server is printed as it is, never read as rich markup.
    assert worker.fail(task_id, token, "CUDA [/] out of [red]memory")
    result = fairgpu(url, "watch", task_id)
    assert result.exit_code == 3
    assert "FAILURE" in result.stdout
    assert "CUDA [/] out of [red]memory" in result.stdout
    assert result.stderr == ""


# -- cancel ---------------------------------------------------------------------------------------
def test_cancel_revokes_a_queued_job_and_stops_a_running_one(url: str, worker: Worker) -> None:
    queued = submit(url)
    assert f"Revoked {queued}: it was still queued" in ok(fairgpu(url, "cancel", queued))
    assert as_json(fairgpu(url, "status", queued, "--json"))["status"] == "REVOKED"

    running = submit(url)
    worker.start(running, worker.lease())
    assert f"Asked {running} to stop" in ok(fairgpu(url, "cancel", running))
    state = as_json(fairgpu(url, "cancel", running, "--json"))
    assert state["status"] == "STARTED"
    assert state["cancel_requested"] is True


def test_cancelling_an_ended_job_is_one_line(url: str) -> None:
    task_id = submit(url)
    ok(fairgpu(url, "cancel", task_id))
    line = one_error_line(fairgpu(url, "cancel", task_id))
    assert line == f"fairgpu: 409 the task has already ended: REVOKED at {url}/tasks/{task_id}"


# -- billing --------------------------------------------------------------------------------------
def test_billing_lists_the_charges_and_their_total(url: str, worker: Worker) -> None:
    assert ok(fairgpu(url, "billing")).strip() == "No charges."
    first, second = submit(url, duration="2"), submit(url, duration="6")
    worker.run(first)
    worker.run(second)
    table = ok(fairgpu(url, "billing"))
    assert first in table
    assert second in table
    assert "4.00" in table  # the total: 1.00 + 3.00
    records = as_json(fairgpu(url, "billing", "--json"))
    assert [r["task_id"] for r in records] == [second, first]
    assert {r["user_id"] for r in records} == {OWNER}
    assert as_json(fairgpu(url, "billing", "--json", key=OTHER)) == []


# -- the endpoints of issue 6: /tasks, /account, /admin/... ---------------------------------------
def test_tasks_lists_a_page_and_all_of_them_with_all(url: str) -> None:
    submitted = [submit(url) for _ in range(5)]
    newest_first = submitted[::-1]
    page = as_json(fairgpu(url, "tasks", "--limit", "2", "--json"))
    assert [t["task_id"] for t in page["tasks"]] == newest_first[:2]
    assert page["next_cursor"]

    table = ok(fairgpu(url, "tasks", "--limit", "2"))
    assert all(task_id in table for task_id in newest_first[:2])
    assert newest_first[2] not in table
    assert f"fairgpu tasks --cursor {page['next_cursor']}" in table

    second = as_json(
        fairgpu(url, "tasks", "--limit", "2", "--cursor", page["next_cursor"], "--json")
    )
    assert [t["task_id"] for t in second["tasks"]] == newest_first[2:4]

    every = as_json(fairgpu(url, "tasks", "--limit", "2", "--all", "--json"))
    assert [t["task_id"] for t in every["tasks"]] == newest_first
    assert every["next_cursor"] is None
    table = ok(fairgpu(url, "tasks", "--limit", "2", "--all"))
    assert all(task_id in table for task_id in submitted)
    assert "--cursor" not in table


def test_tasks_filters_by_status(url: str) -> None:
    kept, revoked = submit(url), submit(url)
    ok(fairgpu(url, "cancel", revoked))
    listed = as_json(fairgpu(url, "tasks", "--status", "revoked", "--json"))
    assert [t["task_id"] for t in listed["tasks"]] == [revoked]
    listed = as_json(fairgpu(url, "tasks", "--status", "PENDING", "--json"))
    assert [t["task_id"] for t in listed["tasks"]] == [kept]
    assert ok(fairgpu(url, "tasks", key=OTHER)).strip() == "No tasks."


def test_account_shows_who_the_key_is(url: str) -> None:
    shown = as_json(fairgpu(url, "account", "--json", key=OTHER))
    month = shown.pop("month")
    assert shown == {
        "user_id": SECOND,
        "description": "Second demo account, to try ownership by hand",
        "share": 1,
        "admin": False,
        "run_scripts": False,
        "max_queued": 1000,
        "max_running": None,
        "max_held_gpu_seconds": None,
    }
    assert (month["billed_seconds"], month["budget_gpu_seconds"]) == (0, None)
    table = ok(fairgpu(url, "account"))
    assert OWNER in table
    assert "admin" in table
    assert "yes" in table
    assert f"billed in {month['month']}" in table and "0 GPU-s, 0.00" in table


def test_queues_for_an_admin(url: str) -> None:
    submit(url)
    submit(url, kind="long", duration="100")
    submit(url, key=OTHER)
    view = as_json(fairgpu(url, "queues", "--json"))
    queued = {q["name"]: q["queued"] for q in view["queues"]}
    assert queued == {"short": 2, "long": 1}
    short = next(q for q in view["queues"] if q["name"] == "short")
    assert {a["user_id"]: a["queued"] for a in short["top_accounts"]} == {OWNER: 1, SECOND: 1}
    table = ok(fairgpu(url, "queues"))
    assert "short" in table
    assert "long" in table
    assert "11111111…: 1" in table


def test_queues_for_someone_else_says_they_are_not_an_admin(url: str) -> None:
    line = one_error_line(fairgpu(url, "queues", key=OTHER))
    assert line == f"fairgpu: 404 at {url}/admin/queues: account {SECOND} is not an admin"
    # The admin API hides itself from a wrong key too; the client says what is wrong.
    line = one_error_line(fairgpu(url, "queues", key="wrong"))
    assert line == f"fairgpu: 401 missing or invalid API key (header X-API-Key) at {url}/account"


def test_admin_promote_moves_a_job_to_the_front(url: str) -> None:
    first, second = submit(url), submit(url, key=OTHER)
    assert as_json(fairgpu(url, "status", second, "--json", key=OTHER))["position"] == 1
    out = ok(fairgpu(url, "admin", "promote", second))
    assert f"Promoted {second}" in out
    assert as_json(fairgpu(url, "status", second, "--json", key=OTHER))["position"] == 0
    assert as_json(fairgpu(url, "status", first, "--json"))["position"] == 1
    line = one_error_line(fairgpu(url, "admin", "promote", first, key=OTHER))
    assert "not an admin" in line


def test_admin_drop_asks_first_and_revokes_the_queued_jobs(url: str) -> None:
    task_id = submit(url)
    result = CliRunner().invoke(
        cli, ["admin", "drop", "short", "--url", url, "--key", DEMO], input="n\n"
    )
    assert result.exit_code == 1
    # The prompt and the error share stderr; the answer's newline came from the (fake) terminal.
    assert result.stderr.startswith("Revoke every job in short (queued ones now")
    assert result.stderr.endswith("fairgpu: nothing dropped from short\n")
    assert as_json(fairgpu(url, "status", task_id, "--json"))["status"] == "PENDING"

    assert as_json(fairgpu(url, "admin", "drop", "short", "--yes", "--json")) == {
        "queue": "short",
        "dropped": 1,
        "stopped": 0,
    }
    assert as_json(fairgpu(url, "status", task_id, "--json"))["status"] == "REVOKED"


def test_admin_release_returns_a_running_job_to_the_front(url: str, worker: Worker) -> None:
    waiting, running = submit(url), submit(url, key=OTHER)
    worker.start(waiting, worker.lease())  # the fairest job: the demo account's
    line = one_error_line(fairgpu(url, "admin", "promote", waiting))
    assert line == f"fairgpu: 409 the task is STARTED at {url}/admin/tasks/{waiting}/promote"

    assert as_json(fairgpu(url, "status", running, "--json", key=OTHER))["position"] == 0
    state = as_json(fairgpu(url, "admin", "release", waiting, "--json"))
    assert state["task_id"] == waiting
    # Back at the front of the queue: the other account's job is behind it again. (The job's
    # own record says STARTED until a worker starts it again, as after a reclaim.)
    assert as_json(fairgpu(url, "status", running, "--json", key=OTHER))["position"] == 1
    short = as_json(fairgpu(url, "queues", "--json"))["queues"][0]
    assert (short["name"], short["stats"]["released"]) == ("short", 1)
    assert "not an admin" in one_error_line(fairgpu(url, "admin", "release", running, key=OTHER))


# -- what people read -----------------------------------------------------------------------------
def test_durations_places_and_estimates_read_well() -> None:
    assert [span(s) for s in (0.25, 4, 42.4, 185, 7800)] == [
        "0.2 s",
        "4 s",
        "42 s",
        "3 min 5 s",
        "2 h 10 min",
    ]
    assert [place(p) for p in (0, 1, 3)] == ["next in line", "1 job ahead", "3 jobs ahead"]
    assert eta(1000.0 + 42.4, now=1000.0).startswith("starts in ~42 s (at ")
    assert eta(1000.5, now=1000.0) == "starts any moment"


def test_watch_on_a_terminal_draws_a_live_line_then_the_result(url: str, worker: Worker) -> None:
    task_id = submit(url, duration="2")
    worker.run(task_id)
    result = fairgpu(url, "watch", task_id, env={"FORCE_COLOR": "1"})  # rich: a terminal
    out = ok(result)
    assert "\x1b[" in out  # drawn with terminal controls
    assert task_id in out
    assert "SUCCESS" in out
    assert "1.00 (2 GPU-s, " in out
