"""The dev stack hands its settings to the processes it starts as environment variables: every
setting must reach them intact, lists and secrets included."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from app.dev.stack import as_environment
from app.settings import Settings


class WithSecret(Settings):
    """A setting that is a secret, as a database password will be."""

    database_password: SecretStr = SecretStr("")


def read_back(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, cls: type[Settings]
) -> Settings:
    for name in cls.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return cls()


def test_every_setting_reaches_a_child_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(
        redis_url="redis://127.0.0.1:7000/3",
        users_file=Path("somewhere/users.json"),
        worker_queues=["long", "short"],
        job_modules=["tests.jobs.sample", "my_team.jobs"],
        timeout_grace_s=2.5,
        access_log=True,
        host_gpu_id=3,
        log_format="text",
    )
    assert read_back(as_environment(settings), monkeypatch, Settings) == settings


def test_a_secret_is_passed_in_the_clear_not_as_stars(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = WithSecret(database_password=SecretStr("s3cret, with a comma"))
    env = as_environment(settings)
    assert env["DATABASE_PASSWORD"] == "s3cret, with a comma"
    back = read_back(env, monkeypatch, WithSecret)
    assert isinstance(back, WithSecret)
    assert back.database_password.get_secret_value() == "s3cret, with a comma"


def test_an_unset_optional_setting_stays_unset() -> None:
    assert "HOST_GPU_ID" not in as_environment(Settings(host_gpu_id=None))
