"""Script jobs through real processes, over HTTP only (issue 40, docs/scripts.md): a project with
neither a lock nor requirements runs in the base environment, one with a requirements.txt and
one with a uv.lock in environments built from them (the second job of a project finds its
environment built); a script's log, progress, artifacts, output file and exit code become the
job's; an upload over 1 MiB runs; bad env names, code that is not the account's and accounts
without run_scripts are refused.

The packages come from the index the machine's uv is configured with; where none answers (uv
cannot lock a one-dependency project), the tests that need one are skipped, saying so."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import (
    DEMO_KEY,
    OTHER_KEY,
    ended,
    log_text,
    post_job,
    run_script,
    script_body,
    script_stack,
    upload,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
MOST = 3 << 20  # MAX_CODE_BYTES here: an upload over 1 MiB fits
#: The script of every project here: it logs to both streams, reports progress, leaves an
#: artifact, writes its output file (what it sees of its packages and environment), and exits
#: with EXIT_WITH.
MAIN = b"""\
import json, os, sys
print("hello from the script", flush=True)
print("a word on stderr", file=sys.stderr, flush=True)
print("fairgpu:progress 0.5 half way", flush=True)
folder = os.path.join(os.environ["FAIRGPU_ARTIFACTS_DIR"], "plots")
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "loss.txt"), "w") as f:
    f.write("0.25\\n")
seen = {"args": sys.argv[1:], "greeting": os.environ.get("GREETING"), "cwd": os.getcwd(),
        "job": os.environ["FAIRGPU_JOB_ID"], "preemptible": os.environ["FAIRGPU_PREEMPTIBLE"]}
for name in ("six", "iniconfig"):
    try:
        seen[name] = __import__(name).__file__
    except ImportError:
        seen[name] = None
if os.path.exists("weights.bin"):
    seen["weights"] = os.path.getsize("weights.bin")
with open(os.environ["FAIRGPU_OUTPUT"], "w") as f:
    json.dump(seen, f)
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""
COMMAND = ["python", "main.py", "--lr", "0.1"]
PYPROJECT = b"""\
[project]
name = "locked-demo"
version = "0.1.0"
requires-python = ">=3.9"
dependencies = ["iniconfig"]
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("script-jobs-logs")
    with script_stack(logs, max_code_bytes=MOST, min_billed_s=0.1) as started:
        yield started


@pytest.fixture(scope="module")
def uv_lock(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """PYPROJECT's uv.lock, made against the machine's own index; a skip where none answers."""
    folder = tmp_path_factory.mktemp("lock")
    (folder / "pyproject.toml").write_bytes(PYPROJECT)
    try:
        done = subprocess.run(
            ["uv", "lock", "--quiet"], cwd=folder, capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"no package index reachable: uv lock did not finish ({error})")
    if done.returncode != 0:
        pytest.skip(f"no package index reachable: uv lock failed: {done.stderr.strip()[-300:]}")
    return (folder / "uv.lock").read_bytes()


@pytest.fixture(scope="module")
def base_code(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> str:
    return upload(stack, tmp_path_factory.mktemp("base"), {"main.py": MAIN})


def output(state: dict[str, Any]) -> dict[str, Any]:
    assert state["status"] == "SUCCESS", (state["error_kind"], state["error"])
    return dict(state["result"]["output"])


def test_a_project_with_neither_runs_in_the_base_environment_as_a_job(
    stack: Stack, base_code: str
) -> None:
    task_id = run_script(stack, base_code, COMMAND, {"GREETING": "hi"})
    done = ended(stack, task_id)
    seen = output(done)
    assert seen["args"] == ["--lr", "0.1"]
    assert (seen["greeting"], seen["job"], seen["preemptible"]) == ("hi", task_id, "0")
    assert seen["six"] is None and seen["iniconfig"] is None  # the bare base: nothing in it
    result = done["result"]
    assert result["exit_code"] == 0
    assert done["progress"] == {"fraction": 0.5, "message": "half way"}
    log = log_text(stack, task_id)
    assert "hello from the script" in log and "a word on stderr" in log
    assert [(a["name"], a["size"]) for a in result["artifacts"]] == [("plots/loss.txt", 5)]
    got = httpx.get(
        f"{stack.url}/tasks/{task_id}/artifacts/plots/loss.txt",
        headers={"X-API-Key": DEMO_KEY},
        timeout=10,
    )
    assert (got.status_code, got.text) == (200, "0.25\n")


def test_a_nonzero_exit_is_a_failure_with_its_code(stack: Stack, base_code: str) -> None:
    task_id = run_script(stack, base_code, COMMAND, {"EXIT_WITH": "3"})
    done = ended(stack, task_id)
    assert (done["status"], done["error_kind"]) == ("FAILURE", "exit_code"), done["error"]
    assert done["result"]["exit_code"] == 3
    assert "hello from the script" in log_text(stack, task_id)  # its log is kept


def test_requirements_are_installed_and_the_second_job_finds_them_built(
    stack: Stack, uv_lock: bytes, tmp_path: Path
) -> None:
    code = upload(stack, tmp_path, {"main.py": MAIN, "requirements.txt": b"six\n"})
    first = ended(stack, run_script(stack, code, COMMAND), timeout=180)
    assert output(first)["six"] is not None
    assert first["result"]["environment"]["cached"] is False
    assert first["result"]["environment"]["seconds"] > 0

    second = ended(stack, run_script(stack, code, ["python", "main.py", "again"]))
    assert output(second)["six"] == output(first)["six"]  # the same environment
    assert second["result"]["environment"]["cached"] is True


def test_a_locked_project_is_installed_as_locked(
    stack: Stack, uv_lock: bytes, tmp_path: Path
) -> None:
    files = {"main.py": MAIN, "pyproject.toml": PYPROJECT, "uv.lock": uv_lock}
    done = ended(stack, run_script(stack, upload(stack, tmp_path, files), COMMAND), timeout=180)
    seen = output(done)
    assert seen["iniconfig"] is not None and seen["six"] is None  # exactly what it locked
    assert done["result"]["environment"]["cached"] is False


def test_a_project_uploaded_over_a_mib_runs(stack: Stack, tmp_path: Path) -> None:
    weights = os.urandom(1536 * 1024)
    code = upload(stack, tmp_path, {"main.py": MAIN, "weights.bin": weights})
    assert output(ended(stack, run_script(stack, code, COMMAND)))["weights"] == len(weights)


@pytest.mark.parametrize(
    "name", ["FAIRGPU_JOB_ID", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "PYTHONPATH", "PATH", "A-B"]
)
def test_refused_names_in_env_are_a_422(stack: Stack, base_code: str, name: str) -> None:
    reply = post_job(stack, script_body(base_code, COMMAND, {name: "x"}))
    assert reply.status_code == 422, reply.text
    assert any("env" in error["loc"] for error in reply.json()["detail"]), reply.text


def test_accounts_without_run_scripts_and_code_not_theirs_are_refused(
    stack: Stack, base_code: str, tmp_path: Path
) -> None:
    theirs = post_job(stack, script_body(base_code, COMMAND), OTHER_KEY)
    assert theirs.status_code == 403, theirs.text
    assert "run_scripts" in theirs.json()["detail"]
    with pytest.raises(AssertionError, match="403"):
        upload(stack, tmp_path, {"main.py": MAIN}, OTHER_KEY)

    unknown = post_job(stack, script_body("0" * 64, COMMAND))
    assert unknown.status_code == 422, unknown.text
    assert [e["loc"] for e in unknown.json()["detail"]] == [["body", "input", "code"]]
    typed = post_job(stack, {"kind": "short", "duration_s": 0.2, "preemptible": True})
    assert typed.status_code == 422, typed.text
