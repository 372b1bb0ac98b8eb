"""The `fairgpu` command's own pieces."""

from __future__ import annotations

from typer.testing import CliRunner

from app.client.cli import cli
from app.dev.console import without_password


def test_a_password_in_the_redis_url_is_never_printed() -> None:
    assert without_password("redis://:s3cret@db:6379/0") == "redis://:***@db:6379/0"
    assert without_password("rediss://app:s3cret@db:6380/1") == "rediss://app:***@db:6380/1"
    assert without_password("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_help_lists_the_dev_command() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "dev" in result.output
