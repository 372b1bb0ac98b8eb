"""The embedded Redis's port, when one is chosen (`fairgpu dev --redis-port`, or
EMBEDDED_REDIS_PORT): a taken one is one line naming it, with nothing started. That the chosen
port is the one used is tested on the real command (tests/e2e/test_dev_start.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.dev.port import PortInUseError
from app.dev.stack import Stack
from app.settings import Settings
from tests.dev.test_port_in_use import HERE, plain_listener
from tests.support import fast_settings


def test_a_taken_redis_port_is_one_line_and_nothing_starts(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    with plain_listener() as taken:
        settings = fast_settings(embedded_redis_port=taken)
        stack = Stack(settings, use_given_redis=False, workdir=tmp_path / "run", log_dir=logs)
        with pytest.raises(PortInUseError) as refused:
            stack.start()
    said = f"the embedded Redis's port {taken} is in use (by another program: {HERE})"
    assert str(refused.value) == said
    assert (stack.redis_server, stack.api) == (None, None)
    assert not logs.exists()  # a refusal leaves no folder behind


def test_the_redis_port_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBEDDED_REDIS_PORT", "6390")
    assert Settings().embedded_redis_port == 6390
    monkeypatch.setenv("EMBEDDED_REDIS_PORT", "0")
    with pytest.raises(ValidationError, match="embedded_redis_port"):
        Settings()
