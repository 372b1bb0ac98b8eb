"""`fairgpu types` and `fairgpu submit --type` against the real API (served by uvicorn in a thread
on the suite's Redis, with the API tests' job types registered), and what `status` shows of a
typed job: its type, how it ended and its output."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from app.models import Status
from app.settings import Settings
from tests.api.helpers import OWNER, USERS_FILE, WAIT_S, Worker
from tests.api.typed_jobs import ECHO, ECHO_MAX_S, MISSING
from tests.client import test_client_cli as served
from tests.client.test_client_cli import as_json, fairgpu, ok, one_error_line

#: The real API in a thread, as the other client tests have it, on this module's settings.
server = served.server
url = served.url
worker = served.worker


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url, users_file=USERS_FILE, job_modules=["tests.api.typed_jobs"]
    )


def row(table: str, name: str) -> str:
    """The value on the row called name of a fields table (two columns, no frame)."""
    [value] = [
        line[len(name) :].strip() for line in table.splitlines() if line.startswith(name + " ")
    ]
    return value


def submit(url: str, *args: str) -> str:
    task_id: str = as_json(fairgpu(url, "submit", *args, "--json"))["task_id"]
    return task_id


# -- types ----------------------------------------------------------------------------------------
def test_types_lists_each_type_and_whether_it_can_run(url: str) -> None:
    table = ok(fairgpu(url, "types"))

    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines() if line.strip()}
    # queue, max s, gpus, preemptible, available
    assert rows[ECHO][:5] == ["long", f"{ECHO_MAX_S:g}", "1", "no", "yes"]
    assert " ".join(rows[ECHO][5:]) == "Says its text back."
    assert " ".join(rows[MISSING]).startswith("short 60 1 no no: needs fairgpu_no_such_package")
    # What a submit accepts: 60 s in burn's own queue (MAX_SHORT_S), 3000 s in long.
    assert rows["burn"][:7] == ["short", "60", "(long", "3000)", "1", "no", "yes"]
    assert rows["vad"][3:5] == ["no", "yes"]
    assert rows["digits-train"][3] == "yes"  # the built-in preemptible type


def test_types_json_has_the_schemas(url: str) -> None:
    types = {t["name"]: t for t in as_json(fairgpu(url, "types", "--json"))}

    assert types[ECHO]["input_schema"]["required"] == ["text"]
    assert types[ECHO]["output_schema"]["properties"]["text"]["type"] == "string"
    assert types[MISSING]["available"] is False


# -- submit --type --------------------------------------------------------------------------------
def test_submit_a_typed_job_with_its_input(url: str) -> None:
    out = ok(fairgpu(url, "submit", "--type", ECHO, "--input", '{"text": "hi"}'))
    assert out.startswith("Submitted ")
    assert f"({ECHO}, its longest budget)" in out
    task_id = out.split()[1]

    state = as_json(fairgpu(url, "status", task_id, "--json"))
    assert (state["type"], state["kind"], state["status"]) == (ECHO, "long", "PENDING")
    assert row(ok(fairgpu(url, "status", task_id)), "type") == ECHO


def test_submit_reads_the_input_from_a_file_with_a_budget_and_queue(
    url: str, tmp_path: Path, r: redis.Redis
) -> None:
    given = tmp_path / "input.json"
    given.write_text('{"text": "from a file", "points": [{"x": 1, "y": 2}]}', encoding="utf-8")

    task_id = submit(url, "--type", ECHO, "--input", f"@{given}", "--duration", "2.5")
    state = as_json(fairgpu(url, "status", task_id, "--json"))
    assert (state["kind"], state["result"]) == ("long", None)
    kept = json.loads(r.get(f"fairgpu:input:{task_id}") or b"")
    assert kept == {"text": "from a file", "points": [{"x": 1, "y": 2}]}

    short = submit(url, "--type", ECHO, "--input", '{"text": "x"}', "--kind", "short")
    assert as_json(fairgpu(url, "status", short, "--json"))["kind"] == "short"


def test_submit_keeps_the_original_way(url: str) -> None:
    task_id = submit(url, "short", "5")

    state = as_json(fairgpu(url, "status", task_id, "--json"))
    assert (state["type"], state["kind"]) == ("burn", "short")


def test_a_refused_typed_job_is_one_line_naming_the_field(url: str) -> None:
    line = one_error_line(fairgpu(url, "submit", "--type", "nope"))
    assert line.startswith("fairgpu: 422 type: unknown job type")

    bad = '{"text": "hi", "points": [{"x": 1}]}'
    line = one_error_line(fairgpu(url, "submit", "--type", ECHO, "--input", bad))
    assert line.startswith("fairgpu: 422 input.points.0.y: Field required")

    line = one_error_line(fairgpu(url, "submit", "--type", MISSING, "--input", '{"text": "x"}'))
    assert "fairgpu_no_such_package" in line

    args = ["--type", ECHO, "--input", '{"text": "x"}', "--duration", "11"]
    line = one_error_line(fairgpu(url, "submit", *args))
    assert line.startswith(f"fairgpu: 422 duration_s must be at most 10 for a job of type {ECHO}")


def test_a_need_of_a_card_reaches_the_server_which_checks_it_against_its_catalog(
    url: str,
) -> None:
    """This server has no GPU_CLASSES: a class is unknown to it, whether the job is typed or a
    burn job (sent as a typed one, the short body having no `gpu`); a memory alone it takes."""
    typed = ["--type", ECHO, "--input", '{"text": "x"}', "--gpu-class", "big"]
    line = one_error_line(fairgpu(url, "submit", *typed))
    assert line.startswith("fairgpu: 422 gpu.classes: this deployment has no GPU classes"), line
    line = one_error_line(fairgpu(url, "submit", "short", "5", "--gpu-class", "big"))
    assert line.startswith("fairgpu: 422 gpu.classes: this deployment has no GPU classes"), line
    task_id = submit(url, "short", "5", "--gpu-memory", "16")
    state = as_json(fairgpu(url, "status", task_id, "--json"))
    assert (state["type"], state["kind"]) == ("burn", "short")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--type", ECHO, "--input", "{not json"], "--input is not JSON"),
        (["--type", ECHO, "--input", "@no-such-file.json"], "--input @no-such-file.json: cannot"),
        (["short", "5", "--type", ECHO], "give KIND DURATION, or --type NAME, not both"),
        ([], "give KIND DURATION (a burn job), or --type NAME"),
        (["short"], "give KIND DURATION (a burn job), or --type NAME"),
        (["short", "5", "--input", "{}"], "--input, --duration and --kind go with --type NAME"),
    ],
    ids=["not-json", "no-file", "both", "neither", "no-duration", "input-without-type"],
)
def test_a_submit_given_the_wrong_arguments_is_a_usage_error(
    url: str, r: redis.Redis, args: list[str], says: str
) -> None:
    line = one_error_line(fairgpu(url, "submit", *args), 2)

    assert says in line
    assert r.keys("fairgpu:job:*") == []


# -- status and watch of a typed job -------------------------------------------------------------
def test_status_shows_a_successful_jobs_output(url: str, worker: Worker) -> None:
    task_id = submit(url, "--type", ECHO, "--input", '{"text": "hi"}', "--kind", "short")
    token = worker.lease("short")
    worker.start(task_id, token)
    assert worker.recorder.finish(
        task_id,
        token,
        Status.SUCCESS,
        charge=None,
        owner=OWNER,
        output='{"text": "hi"}',
        peak_rss_bytes=3 * 2**20,
    )

    table = ok(fairgpu(url, "status", task_id))
    assert row(table, "output") == '{"text": "hi"}'
    assert row(table, "peak RSS") == "3.0 MiB"
    assert "ended by" not in table
    state = as_json(fairgpu(url, "status", task_id, "--json"))
    assert state["result"]["output"] == {"text": "hi"}


def test_status_shows_how_a_failed_job_ended(url: str, worker: Worker) -> None:
    task_id = submit(url, "--type", ECHO, "--input", '{"text": "hi"}', "--kind", "short")
    token = worker.lease("short")
    worker.start(task_id, token)
    assert worker.recorder.finish(
        task_id,
        token,
        Status.FAILURE,
        charge=None,
        owner=OWNER,
        error="ran past its 10 s",
        error_kind="timeout",
    )

    table = ok(fairgpu(url, "status", task_id))
    assert row(table, "ended by") == "timeout"
    assert row(table, "error") == "ran past its 10 s"
    assert as_json(fairgpu(url, "status", task_id, "--json"))["error_kind"] == "timeout"


@pytest.fixture
def runs_the_next_job(worker: Worker, r: redis.Redis) -> Iterator[threading.Thread]:
    """A worker stand-in in a thread, started by the test: it blocks on the broker's list of
    short triggers until a job is queued (no polling), then runs that job to SUCCESS."""

    def run() -> None:
        assert r.blpop(["short"], timeout=WAIT_S) is not None, "no job was queued"
        lease = worker.service.queues["short"].dequeue()
        assert lease is not None
        worker.start(lease.task_id, lease.token)
        assert worker.recorder.finish(
            lease.task_id,
            lease.token,
            Status.SUCCESS,
            charge=None,
            owner=OWNER,
            output='{"text": "hi"}',
        )

    thread = threading.Thread(target=run, name="worker stand-in", daemon=True)
    yield thread
    thread.join(WAIT_S)
    assert not thread.is_alive()


def test_submit_watch_follows_a_typed_job_to_its_output(
    url: str, runs_the_next_job: threading.Thread
) -> None:
    runs_the_next_job.start()
    args = ["--type", ECHO, "--input", '{"text": "hi"}', "--kind", "short", "--watch"]

    out = ok(fairgpu(url, "submit", *args))

    assert out.startswith("Submitted ")
    assert "SUCCESS" in out
    assert row(out, "output") == '{"text": "hi"}'
