"""`fairgpu run`'s parts that need no server: its command line (the budget, --gpus, --env, the
command), refused before anything is packed or sent; the exit code each end of a job maps to;
the result it prints; and what Ctrl-C does, with a terminal to ask on and without one."""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from app.client import run_args, run_command
from app.client.cli import cli
from app.client.errors import INTERRUPTED, USAGE
from app.client.http import Cancelled, JobEvent, StreamPlace
from app.client.pack import pack
from app.client.run_args import (
    MAX_COMMAND_ITEMS,
    ArgumentError,
    check_command,
    parse_duration,
    parse_env,
    refused_name,
)
from app.client.run_command import follow
from app.client.run_outcome import PROMPT, ask_to_cancel, exit_code, result_table, wants_cancel
from app.client.transport import RequestError
from app.models import Artifact, ErrorKind, JobResult, ScriptEnvironment, Status, TaskStatus
from app.usage_models import BillingRecord

NOWHERE = "http://127.0.0.1:9"  # nothing listens: a command that got that far exits 1


def state(
    status: Status,
    error_kind: ErrorKind | None = None,
    code: int | None = None,
    **result: object,
) -> TaskStatus:
    finished = {"started_at": 100.0, "finished_at": 104.0} if status.terminal else {}
    ran = JobResult(duration_s=60, enqueued_at=99.0, exit_code=code, **finished, **result)
    return TaskStatus(
        task_id="t-1",
        status=status,
        kind="short",
        attempts=1,
        type="script",
        error_kind=error_kind,
        error=None if error_kind is None else f"it ended: {error_kind}",
        result=ran,
    )


# -- the command line -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        ("45", 45),
        ("2.5", 2.5),
        ("30s", 30),
        ("90m", 5400),
        ("10min", 600),
        ("2h", 7200),
        ("1.5h", 5400),
        ("1h30m", 5400),
        ("1h30m15s", 5415),
        ("1d", 86400),
        (" 2H ", 7200),
    ],
)
def test_a_budget_is_seconds_or_amounts_with_units(given: str, seconds: float) -> None:
    assert parse_duration(given) == seconds


@pytest.mark.parametrize(
    "given", ["", "0", "-5", "0h", "inf", "nan", "2x", "h", "30m1h", "1h1h", "1h 30m", "2hours"]
)
def test_a_budget_that_is_not_a_time_above_zero_is_refused(given: str) -> None:
    with pytest.raises(ArgumentError, match="--duration"):
        parse_duration(given)


def test_gpu_flags_become_the_submits_need_of_a_card() -> None:
    assert run_args.gpu_need(None, None) is None
    assert run_args.gpu_need(["big", "small"], None) == {"classes": ["big", "small"]}
    assert run_args.gpu_need([], 40.0) == {"min_memory_gb": 40.0}
    assert run_args.gpu_need(["big"], 40.0) == {"classes": ["big"], "min_memory_gb": 40.0}


def test_variables_are_name_value_pairs_the_last_winning() -> None:
    given = ["LR=0.1", "URL=http://x/?a=b", "EMPTY=", "LR=0.2"]
    assert parse_env(given, {}) == {"LR": "0.2", "URL": "http://x/?a=b", "EMPTY": ""}


def test_a_name_alone_takes_this_shells_value_and_must_be_set() -> None:
    assert parse_env(["WANDB_API_KEY"], {"WANDB_API_KEY": "k"}) == {"WANDB_API_KEY": "k"}
    with pytest.raises(ArgumentError, match="WANDB_API_KEY is not set here"):
        parse_env(["WANDB_API_KEY"], {})


@pytest.mark.parametrize(
    "name",
    ["PATH", "FAIRGPU_JOB_ID", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME"],
)
def test_the_services_own_names_are_refused_here_as_the_server_refuses_them(name: str) -> None:
    assert refused_name(name) is not None
    with pytest.raises(ArgumentError, match="the service sets it"):
        parse_env([f"{name}=x"], {})


@pytest.mark.parametrize("name", ["", "1A", "A-B", "A B", "É", "A.B"])
def test_names_that_are_not_a_shells_are_refused(name: str) -> None:
    with pytest.raises(ArgumentError, match="letters, digits and _"):
        parse_env([f"{name}=x"], {})


@pytest.mark.parametrize("name", ["A", "_x", "lr", "MY_PATH", "PYTORCH_CUDA_ALLOC_CONF"])
def test_other_names_are_taken(name: str) -> None:
    assert refused_name(name) is None


def test_the_limits_here_are_the_script_types_own() -> None:
    from app.jobs.builtin import script  # the server's side: imported by this test alone

    assert run_args.MAX_COMMAND_ITEMS == script.MAX_COMMAND_ITEMS
    assert run_args.MAX_COMMAND_ITEM_CHARS == script.MAX_ARGUMENT_CHARS
    assert run_args.MAX_ENV_ITEMS == script.MAX_ENV_ITEMS
    assert run_args.MAX_ENV_VALUE_CHARS == script.MAX_ENV_VALUE_CHARS
    assert run_args.REFUSED_PREFIXES == script.REFUSED_PREFIXES
    assert run_args.REFUSED_NAMES == script.REFUSED_NAMES
    for name in ["A" * 128, "A" * 129, "_1", "1_", "PATH", "PYTHONX", "Path", "ld_x"]:
        here = run_args.refused_name(name) is None
        there = script.ENV_NAME.fullmatch(name) is not None
        there = there and not (
            name in script.REFUSED_NAMES or name.startswith(script.REFUSED_PREFIXES)
        )
        assert here == there, name


def test_too_many_variables_or_too_long_a_value_is_refused() -> None:
    with pytest.raises(ArgumentError, match="more than the 256"):
        parse_env([f"V{n}=x" for n in range(257)], {})
    with pytest.raises(ArgumentError, match="--env BIG: its value has 32,769 characters"):
        parse_env(["BIG=" + "x" * 32769], {})


def test_the_command_has_words_and_not_too_many() -> None:
    assert check_command(["python", "train.py"]) == ["python", "train.py"]
    for bad, why in [
        ([], "give the command"),
        (["python", ""], "empty word"),
        (["x"] * (MAX_COMMAND_ITEMS + 1), "more than"),
        (["x" * 8193], "characters"),
    ]:
        with pytest.raises(ArgumentError, match=why):
            check_command(bad)


def invoke(*args: str) -> tuple[int, str]:
    env = {"FAIRGPU_URL": NOWHERE, "FAIRGPU_API_KEY": "k", "COLUMNS": "200"}
    result = CliRunner().invoke(cli, ["run", *args], env=env)
    return result.exit_code, result.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--gpus", "0", "--", "python", "t.py"], "Invalid value for '--gpus'"),
        (["--env", "LD_PRELOAD=/x.so", "--", "python"], "--env LD_PRELOAD=/x.so: the service"),
        (["--env", "1X=y", "--", "python"], "--env 1X=y: a variable's name"),
        (["--duration", "soon", "--", "python"], "--duration soon: not a time"),
        ([], "give the command to run after --"),
        (["--", "python", ""], "empty word"),
        (["--bogus", "--", "python"], "No such option"),
    ],
)
def test_a_wrong_command_line_is_one_line_and_exit_2_before_anything_is_sent(
    args: list[str], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = invoke(*args)
    assert code == USAGE
    assert said in err
    assert len(err.strip().splitlines()) == 1
    assert "cannot reach" not in err  # refused here: nothing was packed or sent


def test_the_commands_own_options_are_its_own_with_or_without_dashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    for args in (["--", "python", "train.py", "--lr", "0.1"], ["python", "train.py", "--lr", "1"]):
        code, err = invoke("--duration", "2h", *args)
        # past the command line: packed, then stopped by the server that is not there
        assert (code, "cannot reach" in err) == (1, True), err


def test_a_folder_past_the_bounds_is_refused_before_an_upload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for n in range(5):
        (tmp_path / f"f{n}.py").write_bytes(os.urandom(2000))
    for bounded, said in [
        (functools.partial(pack, max_members=3), "5 files and folders, more than the 3 the server"),
        (
            functools.partial(pack, max_bytes=4096),
            "packs to more than 4.0 KiB, the most the server",
        ),
    ]:
        monkeypatch.setattr("app.client.run_command.pack", bounded)
        code, err = invoke("--", "python", "f0.py")
        assert code == USAGE
        assert said in err
        assert "cannot reach" not in err


# -- how it ends ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ended", "code"),
    [
        (state(Status.SUCCESS, code=0), 0),
        (state(Status.FAILURE, "exit_code", 3), 3),
        (state(Status.FAILURE, "exit_code", 255), 255),
        (state(Status.FAILURE, "exit_code", -9), 137),
        (state(Status.FAILURE, "exit_code", -15), 143),
        (state(Status.FAILURE, "timeout"), 124),
        (state(Status.REVOKED, "timeout"), 124),
        (state(Status.REVOKED, "cancelled", -15), 130),
        (state(Status.REVOKED), 130),
        (state(Status.FAILURE, "environment"), 1),
        (state(Status.FAILURE, "crashed"), 1),
        (state(Status.FAILURE, "lost"), 1),
        (state(Status.FAILURE, "setup"), 1),
        (state(Status.FAILURE, "oom"), 1),
        (state(Status.FAILURE, "exception", 0), 1),
        (state(Status.FAILURE, "internal"), 1),
        (state(Status.FAILURE, "exit_code"), 1),  # a code the result does not carry
    ],
)
def test_the_exit_code_is_the_scripts_or_says_how_the_job_ended(
    ended: TaskStatus, code: int
) -> None:
    assert exit_code(ended) == code


def shown(table: object) -> str:
    console = Console(file=io.StringIO(), width=120, highlight=False, markup=False)
    console.print(table)
    return " ".join(console.file.getvalue().split())  # type: ignore[attr-defined]


def test_the_result_says_exit_code_environment_cost_output_and_artifacts() -> None:
    ended = state(
        Status.SUCCESS,
        code=0,
        environment=ScriptEnvironment(cached=False, seconds=12.3),
        output={"loss": 0.1},
        artifacts=[Artifact(name="model.pt", size=3 << 20, sha256="a" * 64)],
    )
    bill = BillingRecord(
        user_id="u",
        task_id="t-1",
        cost=2.0,
        cost_micros=2_000_000,
        description="Short GPU job",
        kind="short",
        gpu_seconds=4.0,
        billed_seconds=4.0,
        billed_at=105.0,
        type="script",
    )
    text = shown(result_table(ended, bill))
    for said in [
        "status SUCCESS",
        "exit code 0",
        "environment built in 12 s",
        "ran 4 s",
        "cost 2.00 (4 GPU-s, Short GPU job)",
        'output {"loss": 0.1}',
        "artifacts model.pt (3.0 MiB)",
    ]:
        assert said in text, text
    cached = state(
        Status.FAILURE, "exit_code", -9, environment=ScriptEnvironment(cached=True, seconds=0)
    )
    text = shown(result_table(cached, None))
    assert "exit code -9 (killed by SIGKILL)" in text
    assert "environment cached" in text
    assert "ended by" not in text  # the exit code says it


def test_a_failure_of_the_services_says_why_and_an_unbilled_one_says_so() -> None:
    text = shown(result_table(state(Status.FAILURE, "setup"), None))
    assert "ended by setup" in text
    assert "error it ended: setup" in text
    assert "cost not billed (it never began)" in text


# -- Ctrl-C ---------------------------------------------------------------------------------------
def test_only_a_yes_cancels() -> None:
    assert [wants_cancel(a) for a in ["y\n", "Y", " yes ", "YES"]] == [True] * 4
    assert [wants_cancel(a) for a in ["", "\n", "n", "no", "yy", "sure"]] == [False] * 6


def test_without_a_terminal_it_never_asks_and_never_cancels() -> None:
    asked, answer = io.StringIO(), io.StringIO("y\n")
    assert ask_to_cancel(False, asked, answer) is False
    assert asked.getvalue() == ""
    assert answer.tell() == 0  # nothing read


def test_on_a_terminal_it_asks_and_an_end_of_input_is_a_no() -> None:
    for typed, cancels in [("y\n", True), ("\n", False), ("", False), ("n\n", False)]:
        asked = io.StringIO()
        assert ask_to_cancel(True, asked, io.StringIO(typed)) is cancels
        assert asked.getvalue().endswith(PROMPT)


class Interrupted:
    """A client whose job's stream is cut by Ctrl-C once, after its first event; then it runs on
    to its end. It notes the cancels asked and where each stream started."""

    def __init__(self) -> None:
        self.cancels: list[str] = []
        self.places: list[StreamPlace] = []

    def events(self, task_id: str, place: StreamPlace) -> Iterator[JobEvent]:
        self.places.append(place)
        if len(self.places) == 1:
            place.last_id = "1-0"
            yield state(Status.STARTED)
            raise KeyboardInterrupt
        yield state(Status.REVOKED, "cancelled", -15)

    def cancel(self, task_id: str) -> Cancelled:
        self.cancels.append(task_id)
        return Cancelled(state(Status.STARTED), True)


def test_ctrl_c_without_a_terminal_leaves_the_job_running_and_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("app.client.run_command._interactive", lambda: False)
    client = Interrupted()
    with pytest.raises(typer.Exit) as ended:
        follow(client, "t-1")  # type: ignore[arg-type]
    assert ended.value.exit_code == INTERRUPTED
    assert client.cancels == []
    said = capsys.readouterr().err
    assert "stopped following t-1; the job goes on" in said
    assert "fairgpu watch t-1" in said and "fairgpu cancel t-1" in said


def test_ctrl_c_and_a_yes_cancels_the_job_and_follows_it_on_from_where_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("app.client.run_command._interactive", lambda: True)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    client = Interrupted()
    last = follow(client, "t-1")  # type: ignore[arg-type]
    assert client.cancels == ["t-1"]
    assert last.status is Status.REVOKED and exit_code(last) == INTERRUPTED
    assert client.places[0] is client.places[1]  # the stream taken up after the last event seen
    assert client.places[1].last_id == "1-0"


def refusal(status: int, detail: str) -> Callable[[], str]:
    def call() -> str:
        raise RequestError(f"{status} {detail} at http://x/enqueue-task", status=status)

    return call


def test_a_request_the_server_refuses_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for status, detail, hint in [
        (403, "this account may not run scripts", ""),
        (413, "the code is over MAX_CODE_BYTES", ""),
        (422, "duration_s must be at most 60 for a short job", " (--long asks for the long queue)"),
        (422, "type: unknown job type", " (this server runs no script jobs)"),
    ]:
        with pytest.raises(typer.Exit) as ended:
            run_command._refused_is_usage(refusal(status, detail), long_hint=True)
        assert ended.value.exit_code == USAGE
        said = capsys.readouterr().err
        assert said == f"fairgpu: {status} {detail} at http://x/enqueue-task{hint}\n"


def test_other_failures_are_the_services_and_left_to_the_session() -> None:
    for status in (401, 429, 500, None):
        with pytest.raises(RequestError):
            run_command._refused_is_usage(refusal(status or 0, "no"), long_hint=True)
