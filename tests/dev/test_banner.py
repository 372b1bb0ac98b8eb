"""What `fairgpu dev` prints once the stack is up, on an 80-column terminal."""

from __future__ import annotations

import io
from pathlib import Path

from app.auth import Accounts
from app.dev.console import banner, curl_example, make_console
from app.dev.stack import Stack, new_webhook_secret
from tests.support import FIXTURES, fast_settings


def printed_banner(
    tmp_path: Path, generated_secret: str | None = None, **settings: object
) -> list[str]:
    stack = Stack(fast_settings(port=8000, **settings), use_given_redis=False, workdir=tmp_path)
    stack.redis_url = "redis://127.0.0.1:6379/0"
    if stack.settings.database_url is None:  # as start() does: the stack's own SQLite file
        own = {"database_url": f"sqlite:///{tmp_path / 'fairgpu.db'}"}
        stack.settings = stack.settings.model_copy(update=own)
        stack.own_database = True
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


def test_the_banner_names_the_broker_the_database_and_the_job_types(tmp_path: Path) -> None:
    lines = printed_banner(
        tmp_path,
        celery_broker_url="amqp://guest:s3cret@127.0.0.1:5672/dev",
        database_url="postgresql+psycopg://fairgpu:s3cret@db/fairgpu",
        job_modules=["tests.jobs.sample"],
    )
    assert "s3cret" not in "\n".join(lines)
    [store] = [line for line in lines if line.startswith("Broker:")]
    assert store == (
        "Broker: amqp://guest:***@127.0.0.1:5672/dev (CELERY_BROKER_URL); "
        "database: postgresql+psycopg://fairgpu:***@db/fairgpu (DATABASE_URL)"
    )
    [jobs] = [line for line in lines if line.startswith("Jobs:")]
    names, _, origin = jobs.removeprefix("Jobs: ").partition(" from ")
    assert {"burn", "digits-train", "vad", "echo", "sleepy"} <= set(names.split(", "))
    assert origin == "app.jobs.builtin, tests.jobs.sample"


def test_the_banner_of_a_stack_that_starts_its_own_stores(tmp_path: Path) -> None:
    lines = printed_banner(tmp_path)
    [store] = [line for line in lines if line.startswith("Broker:")]
    assert store == (
        f"Broker: the Redis above; database: sqlite:///{tmp_path / 'fairgpu.db'} "
        "(made for this run; set DATABASE_URL to keep one)"
    )
    [jobs] = [line for line in lines if line.startswith("Jobs:")]
    assert jobs == (
        "Jobs: burn, ddp-burn, digits-train, script, vad from app.jobs.builtin"
        " (JOB_MODULES adds yours)"
    )


def test_the_banner_warns_of_a_rabbitmq_consumer_timeout_too_short(tmp_path: Path) -> None:
    amqp = {"celery_broker_url": "amqp://guest:guest@127.0.0.1:5672/dev"}
    short = printed_banner(tmp_path, broker_consumer_timeout_s=60, **amqp)
    [warning] = [line for line in short if line.startswith("Warning:")]
    assert "RabbitMQ's consumer_timeout (60 s, as BROKER_CONSUMER_TIMEOUT_S says)" in warning
    enough = printed_banner(tmp_path, broker_consumer_timeout_s=7200, **amqp)
    assert not [line for line in enough if line.startswith("Warning:")]
