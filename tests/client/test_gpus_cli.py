"""`fairgpu submit --gpus N` and `fairgpu run --gpus N` (declared once: options.py GpusOption)
against the real API, with the API tests' types of several cards (tests/api/test_gpus.py): the
count goes as the body's `gpus`, the server judges it, and `status` and `types` show it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.client.cli import cli
from app.client.errors import USAGE
from app.client.http import Client
from app.client.run_command import _submit, send_code
from app.settings import Settings
from tests.api.helpers import USERS_FILE
from tests.api.test_gpus import TWO, UP_TO_8
from tests.client import test_client_cli as served
from tests.client.test_client_cli import DEMO, as_json, fairgpu, ok, one_error_line
from tests.client.test_client_job_types import row

server = served.server
url = served.url


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, users_file=USERS_FILE, job_modules=["tests.api.test_gpus"])


def test_submit_sends_the_count_and_status_shows_it(url: str) -> None:
    reply = as_json(fairgpu(url, "submit", "--type", UP_TO_8, "--gpus", "3", "--json"))
    state = as_json(fairgpu(url, "status", reply["task_id"], "--json"))
    assert (state["type"], state["gpus"]) == (UP_TO_8, 3)
    assert row(ok(fairgpu(url, "status", reply["task_id"])), "gpus") == "3"
    least = as_json(fairgpu(url, "submit", "--type", TWO, "--json"))
    assert as_json(fairgpu(url, "status", least["task_id"], "--json"))["gpus"] == 2
    alone = as_json(fairgpu(url, "submit", "short", "5", "--json"))
    assert "gpus " not in ok(fairgpu(url, "status", alone["task_id"]))  # one card: no row


def test_the_server_judges_the_count(url: str) -> None:
    line = one_error_line(fairgpu(url, "submit", "--type", TWO, "--gpus", "3"))
    assert line.startswith(f"fairgpu: 422 gpus: a job of type {TWO} takes 2 cards, not 3 at ")
    line = one_error_line(fairgpu(url, "submit", "short", "5", "--gpus", "2"))
    assert line.startswith("fairgpu: 422 gpus: a job of type burn takes 1 card, not 2 at ")


@pytest.mark.parametrize("command", ["submit", "run"])
@pytest.mark.parametrize("count", ["0", "65", "two"])
def test_a_count_that_is_not_1_to_64_is_a_usage_error_that_sends_nothing(
    command: str, count: str
) -> None:
    env = {"FAIRGPU_URL": "http://127.0.0.1:9", "FAIRGPU_API_KEY": "k", "COLUMNS": "200"}
    args = [command, "--gpus", count, *(["--type", TWO] if command == "submit" else ["--", "x"])]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == USAGE, result.output
    assert "Invalid value for '--gpus'" in result.stderr
    assert "cannot reach" not in result.stderr


def test_types_show_each_types_range(url: str) -> None:
    rows = {
        line.split()[0]: line.split()[1:]
        for line in ok(fairgpu(url, "types")).splitlines()
        if line.strip()
    }
    # queue, max s, gpus
    assert rows[TWO][:3] == ["short", "60", "2"]
    assert rows[UP_TO_8][:3] == ["short", "60", "2-8"]
    assert "1-64" in rows["script"]


def test_run_sends_its_count_with_the_script_job(url: str, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    with Client(url, DEMO) as client:
        job: dict[str, object] = {"command": ["python", "train.py"], "env": {}}
        job["code"] = send_code(client, tmp_path, include_env=False)
        task_id = _submit(client, job, None, "short", preemptible=False, gpus=4)
        state = client.status(task_id)
    assert (state.type, state.gpus) == ("script", 4)
