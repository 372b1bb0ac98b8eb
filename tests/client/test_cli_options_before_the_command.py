"""`--url` and `--key` before the command as well as after it, and a negative duration read as
what it is: the command line alone, no server needed (an unreachable URL shows which was used)."""

from __future__ import annotations

from typer.testing import CliRunner, Result

from app.client.cli import cli
from app.dev.redis_server import free_port

NOWHERE = f"http://127.0.0.1:{free_port()}"  # nothing listens there
ELSEWHERE = f"http://127.0.0.1:{free_port()}"


def fairgpu(*args: str, **env: str) -> Result:
    clean: dict[str, str | None] = {"FAIRGPU_URL": None, "FAIRGPU_API_KEY": None}
    return CliRunner().invoke(cli, list(args), env={**clean, **env})


def error_line(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.output, result.exception)
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    return line


def test_url_and_key_may_come_before_the_command() -> None:
    line = error_line(fairgpu("--url", NOWHERE, "--key", "k", "status", "t1"), 1)
    assert line == f"fairgpu: cannot reach {NOWHERE}: connection refused"
    line = error_line(fairgpu("--url", NOWHERE, "--key", "k", "admin", "promote", "t1"), 1)
    assert line == f"fairgpu: cannot reach {NOWHERE}: connection refused"


def test_a_key_before_the_command_is_a_key() -> None:
    assert error_line(fairgpu("--url", NOWHERE, "tasks"), 2) == (
        "fairgpu: no API key: pass --key or set FAIRGPU_API_KEY"
    )
    assert "cannot reach" in error_line(fairgpu("--key", "k", "--url", NOWHERE, "tasks"), 1)


def test_after_the_command_wins_then_before_then_the_environment() -> None:
    after = fairgpu("--url", ELSEWHERE, "--key", "k", "status", "t1", "--url", NOWHERE)
    assert NOWHERE in error_line(after, 1)
    before = fairgpu("--url", NOWHERE, "--key", "k", "status", "t1", FAIRGPU_URL=ELSEWHERE)
    assert NOWHERE in error_line(before, 1)
    env = fairgpu("status", "t1", FAIRGPU_URL=NOWHERE, FAIRGPU_API_KEY="k")
    assert NOWHERE in error_line(env, 1)


def test_a_negative_duration_is_one_line_with_exit_code_2_and_sends_nothing() -> None:
    line = error_line(fairgpu("submit", "short", "-5", "--url", NOWHERE, "--key", "k"), 2)
    assert line == "fairgpu submit: DURATION must be a number of seconds above 0, not -5"
    # Any other unknown option is still named as one.
    line = error_line(fairgpu("submit", "short", "2", "--wach", "--url", NOWHERE), 2)
    assert line.startswith("fairgpu submit: No such option: --wach")
