"""Real job types through real processes: the API and a worker with JOB_MODULES naming the
sample job types (tests/jobs/sample.py), spoken to over HTTP only. One stack for the whole
module, and the tests run in order: several look at the worker's warm child across jobs."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import time
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.dev.stack import Stack, as_environment
from tests.support import DEMO_KEY, OTHER_KEY, fast_settings, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
SAMPLE = "tests.jobs.sample"
HEADERS = {"X-API-Key": DEMO_KEY}
TERMINAL = ("SUCCESS", "FAILURE", "REVOKED")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = fast_settings(job_modules=[SAMPLE], timeout_grace_s=0.5, cancel_grace_s=1.0)
    with Stack(
        settings, use_given_redis=False, workers=1, workdir=tmp_path_factory.mktemp("s")
    ) as s:
        yield s


def submit(stack: Stack, body: dict[str, Any]) -> str:
    reply = httpx.post(f"{stack.url}/enqueue-task", headers=HEADERS, json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["task_id"])


def status(stack: Stack, task_id: str) -> dict[str, Any]:
    reply = httpx.get(f"{stack.url}/task-status/{task_id}", headers=HEADERS, timeout=10)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def ended(stack: Stack, task_id: str, timeout: float = 60) -> dict[str, Any]:
    return wait_for(
        lambda: (s := status(stack, task_id))["status"] in TERMINAL and s, timeout, "its end"
    )


def run(stack: Stack, job_type: str, inp: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return ended(stack, submit(stack, {"type": job_type, "input": inp, **extra}))


def bill_of(stack: Stack, task_id: str) -> list[dict[str, Any]]:
    reply = httpx.get(f"{stack.url}/billing-records", headers=HEADERS, timeout=10)
    assert reply.status_code == 200, reply.text
    return [b for b in reply.json() if b["task_id"] == task_id]


def test_a_typed_job_runs_and_returns_its_output_billed_once(stack: Stack) -> None:
    done = run(stack, "echo", {"text": "hello"})
    assert (done["status"], done["type"], done["error_kind"]) == ("SUCCESS", "echo", None)
    assert done["result"]["output"] == {"upper": "HELLO"}
    assert done["result"]["peak_rss_bytes"] > 0
    [bill] = bill_of(stack, done["task_id"])
    assert bill["billed_seconds"] == max(1.0, bill["gpu_seconds"])


def test_setup_runs_once_per_child_across_jobs(stack: Stack) -> None:
    outputs = [run(stack, "counted", {})["result"]["output"] for _ in range(3)]
    assert [o["setups"] for o in outputs] == [1, 1, 1]
    assert len({o["pid"] for o in outputs}) == 1


def test_a_crash_fails_at_once_with_its_last_lines_and_a_fresh_child_serves_the_next(
    stack: Stack,
) -> None:
    before = run(stack, "counted", {})["result"]["output"]
    for how in ("exit", "segv"):
        done = run(stack, "crash", {"how": how})
        assert (done["status"], done["error_kind"], done["attempts"]) == ("FAILURE", "crashed", 1)
        assert "crash: about to go" in done["error"]
        assert len(bill_of(stack, done["task_id"])) == 1  # it held the GPU: billed
    after = run(stack, "counted", {})["result"]["output"]
    assert after["pid"] != before["pid"]
    assert after["setups"] == 1  # setup ran again, in the new child


def test_an_exception_fails_with_its_traceback_and_is_not_retried(stack: Stack) -> None:
    done = run(stack, "fail", {})
    assert (done["status"], done["error_kind"], done["attempts"]) == ("FAILURE", "exception", 1)
    assert "ValueError: the job failed on purpose" in done["error"]


def test_a_job_past_its_budget_is_stopped_as_a_timeout(stack: Stack) -> None:
    done = run(stack, "sleepy", {"seconds": 60}, duration_s=0.5)
    assert (done["status"], done["error_kind"], done["attempts"]) == ("FAILURE", "timeout", 1)
    result = done["result"]
    # stopped at its budget plus TIMEOUT_GRACE_S, far from the 60 s it wanted
    assert result["finished_at"] - result["started_at"] < 30
    assert len(bill_of(stack, done["task_id"])) == 1


def cancel_when_started(stack: Stack, task_id: str) -> float:
    wait_for(lambda: status(stack, task_id)["status"] == "STARTED", 30, "the start")
    asked = time.time()
    reply = httpx.delete(f"{stack.url}/tasks/{task_id}", headers=HEADERS, timeout=10)
    assert reply.status_code == 202, reply.text
    return asked


def test_a_cancel_reaches_a_polite_job_which_stops(stack: Stack) -> None:
    task_id = submit(stack, {"type": "polite", "input": {"seconds": 60}})
    asked = cancel_when_started(stack, task_id)
    done = ended(stack, task_id)
    assert (done["status"], done["error_kind"]) == ("REVOKED", "cancelled")
    # Reported, not asserted (a shared machine): the stop travels over pub/sub.
    print(f"polite job ended {done['result']['finished_at'] - asked:.2f} s after the cancel")
    [bill] = bill_of(stack, task_id)
    assert "cancelled after" in bill["description"]


def test_a_job_that_ignores_a_cancel_is_killed_and_replaced(stack: Stack) -> None:
    before = run(stack, "counted", {})["result"]["output"]["pid"]
    task_id = submit(stack, {"type": "sleepy", "input": {"seconds": 60}})
    cancel_when_started(stack, task_id)
    done = ended(stack, task_id)
    assert (done["status"], done["error_kind"]) == ("REVOKED", "cancelled")
    assert run(stack, "counted", {})["result"]["output"]["pid"] != before


def test_an_output_over_64_kib_fails_with_a_clear_message(stack: Stack) -> None:
    done = run(stack, "huge", {})
    assert (done["status"], done["error_kind"]) == ("FAILURE", "exception")
    assert "64 KiB" in done["error"] or "65536" in done["error"]


def test_an_unavailable_type_is_listed_as_such_and_refused(stack: Stack) -> None:
    types = httpx.get(f"{stack.url}/job-types", headers=HEADERS, timeout=10).json()
    by_name = {t["name"]: t for t in types}
    assert {"burn", "digits-train", "vad", "echo"} <= set(by_name)
    assert by_name["needs-extra"]["available"] is False
    assert "fairgpu_no_such_package" in by_name["needs-extra"]["unavailable_reason"]
    reply = httpx.post(
        f"{stack.url}/enqueue-task", headers=HEADERS, json={"type": "needs-extra"}, timeout=10
    )
    assert reply.status_code == 422, reply.text


def test_digits_train_learns_the_digits(stack: Stack) -> None:
    done = run(stack, "digits-train", {"epochs": 10, "seed": 0})
    assert done["status"] == "SUCCESS", done["error"]
    assert done["result"]["output"]["epochs"] == 10
    assert done["result"]["output"]["accuracy"] >= 0.9
    assert [a["name"] for a in done["result"]["artifacts"]] == ["accuracy.csv"]
    assert done["progress"] == {"fraction": 1.0, "message": "epoch 10 of 10"}


def test_vad_finds_no_speech_in_silence(stack: Stack) -> None:
    clip = io.BytesIO()
    with wave.open(clip, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(16000)
        wav.writeframes(b"\0\0" * 16000)  # one second of silence
    audio = base64.b64encode(clip.getvalue()).decode()
    done = run(stack, "vad", {"audio": audio})
    assert done["status"] == "SUCCESS", done["error"]
    assert done["result"]["output"]["speech_ratio"] == 0


def events_of(stack: Stack, task_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of a stream of the job, read until the server ends it."""
    seen: list[tuple[str, dict[str, Any]]] = []
    name = "message"
    with httpx.stream(
        "GET", f"{stack.url}/task-status/stream/{task_id}", headers=HEADERS, timeout=60
    ) as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                name = line.removeprefix("event:").strip()
            elif line.startswith("data:"):
                seen.append((name, json.loads(line.removeprefix("data:"))))
                name = "message"
    return seen


def test_a_stream_opened_before_the_job_starts_gets_its_progress_and_log_events(
    stack: Stack,
) -> None:
    blocker = submit(stack, {"type": "sleepy", "input": {"seconds": 1.5}})
    wait_for(lambda: status(stack, blocker)["status"] == "STARTED", 30, "the worker busy")
    task_id = submit(stack, {"type": "chatty", "input": {"lines": 3, "files": 0}})
    seen = events_of(stack, task_id)
    assert seen[0][0] == "message" and seen[0][1]["status"] == "PENDING"
    assert seen[-1][0] == "message" and seen[-1][1]["status"] == "SUCCESS"
    progress = [data for name, data in seen if name == "progress"]
    assert progress[-1] == {"fraction": 1.0, "message": "line 3 of 3"}
    logged = [line for name, data in seen if name == "log" for line in data["lines"]]
    dropped = sum(data["dropped"] for name, data in seen if name == "log")
    assert len(logged) + dropped == 9  # three lines each by ctx.log, stdout and stderr
    assert {line["stream"] for line in logged} <= {"log", "stdout", "stderr"}


def test_logs_and_artifacts_are_kept_for_their_owner_only(stack: Stack) -> None:
    done = run(stack, "chatty", {"lines": 2, "files": 3})
    task_id = done["task_id"]
    names = sorted(a["name"] for a in done["result"]["artifacts"])
    assert names == ["file-0.txt", "file-2.txt", "sub/file-1.txt"]
    logs = httpx.get(f"{stack.url}/tasks/{task_id}/logs", headers=HEADERS, timeout=10).json()
    by_stream = {(line["stream"], line["text"]) for line in logs["lines"]}
    assert {("log", "log 1"), ("stdout", "out 1"), ("stderr", "err 1")} <= by_stream
    got = httpx.get(f"{stack.url}/tasks/{task_id}/artifacts/sub/file-1.txt", headers=HEADERS)
    assert (got.status_code, got.text) == (200, "file 1\n")
    other = {"X-API-Key": OTHER_KEY}
    for path in ("logs", "artifacts/file-0.txt"):
        reply = httpx.get(f"{stack.url}/tasks/{task_id}/{path}", headers=other, timeout=10)
        assert reply.status_code == 404, path
    escaping = httpx.get(
        f"{stack.url}/tasks/{task_id}/artifacts/..%2F..%2Fsettings.py", headers=HEADERS
    )
    assert escaping.status_code in (404, 422)


@pytest.mark.parametrize("module", ["app.worker.main", "app.api.serve"])
def test_a_job_module_that_does_not_import_stops_the_process_with_a_clear_message(
    module: str, tmp_path: Path
) -> None:
    env = as_environment(fast_settings(job_modules=["tests.jobs.no_such_module"]))
    done = subprocess.run(
        [sys.executable, "-m", module],
        env={**env, "PATH": "", "PYTHONPATH": str(Path.cwd())},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "tests.jobs.no_such_module" in done.stderr
