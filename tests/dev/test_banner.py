"""What `fairgpu dev` prints once the stack is up, on an 80-column terminal."""

from __future__ import annotations

import io
from pathlib import Path

from app.auth import Accounts
from app.dev.console import banner, curl_example, make_console
from app.dev.stack import Stack, new_webhook_secret
from tests.support import FIXTURES, fast_settings


def printed_banner(tmp_path: Path, generated_secret: str | None = None) -> list[str]:
    stack = Stack(fast_settings(port=8000), use_given_redis=False, workdir=tmp_path)  # not started
    stack.redis_url = "redis://127.0.0.1:6379/0"
    stack.generated_secret = generated_secret
    out = io.StringIO()
    banner(make_console(file=out, width=80), stack, Accounts.load(FIXTURES), str(FIXTURES))
    return out.getvalue().splitlines()


def test_the_curl_line_is_whole_on_an_80_column_terminal(tmp_path: Path) -> None:
    lines = printed_banner(tmp_path)
    assert len(curl_example("http://127.0.0.1:8000")) > 80
    [curl] = [line for line in lines if line.startswith("Try: curl")]
    assert curl.startswith("Try: curl -s -X POST http://127.0.0.1:8000/enqueue-task ")
    assert curl.endswith("""-d '{"kind": "short", "duration_s": 2}'""")


def test_the_banner_names_the_dashboard_and_where_the_keys_are(tmp_path: Path) -> None:
    text = "\n".join(printed_banner(tmp_path))
    assert "/dashboard" in text
    assert f"every key is in {FIXTURES}" in text


def test_the_banner_prints_the_webhook_secret_the_stack_made(tmp_path: Path) -> None:
    secret = new_webhook_secret()
    [line] = [line for line in printed_banner(tmp_path, secret) if line.startswith("Webhooks:")]
    assert f"WEBHOOK_SECRET={secret} " in line  # whole, to copy into a receiver


def test_the_banner_never_prints_a_secret_from_the_environment(tmp_path: Path) -> None:
    [line] = [line for line in printed_banner(tmp_path) if line.startswith("Webhooks:")]
    assert line == "Webhooks: signed with WEBHOOK_SECRET from the environment"
