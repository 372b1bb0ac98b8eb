"""The dev stack runs the webhook sender, supervised like the workers, with settings of its own
where the environment gives none: a WEBHOOK_SECRET made for the run (which signs what the sender
sends) and an ARTIFACTS_DIR in its workdir."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from standardwebhooks import Webhook

from app.dev.stack import Stack, new_webhook_secret
from tests.support import DEMO_KEY, fast_settings, wait_for
from tests.webhooks.receiver import Receiver, receiving

GIVEN = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from receiving()


def test_a_made_secret_is_a_whsec_key_of_32_random_bytes() -> None:
    secret = new_webhook_secret()
    assert secret.startswith("whsec_")
    Webhook(secret)  # the form the signer reads
    assert len(secret) == len("whsec_") + 44
    assert new_webhook_secret() != secret


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_the_stack_sends_webhooks_signed_with_its_own_secret_and_restarts_the_sender(
    tmp_path: Path, receiver: Receiver
) -> None:
    settings = fast_settings(webhook_allow_private=True)
    stack = Stack(settings, use_given_redis=False, workers=0, workdir=tmp_path, supervise=True)
    with stack:
        assert stack.settings.artifacts_dir == tmp_path / "artifacts"
        secret = stack.generated_secret
        assert secret is not None
        assert stack.env["WEBHOOK_SECRET"] == secret
        first = stack.webhooks
        assert first is not None

        first.send_signal(signal.SIGKILL)
        wait_for(lambda: stack.webhooks is not first, what="the sender started again")

        headers = {"X-API-Key": DEMO_KEY}
        body = {"kind": "short", "duration_s": 1, "webhook": receiver.url}
        submitted = httpx.post(f"{stack.url}/enqueue-task", json=body, headers=headers)
        assert submitted.status_code == 200, submitted.text
        task_id = submitted.json()["task_id"]
        # no worker runs it: cancelled while queued, it ends at once
        cancelled = httpx.delete(f"{stack.url}/tasks/{task_id}", headers=headers)
        assert cancelled.status_code == 200, cancelled.text

        [delivery] = wait_for(lambda: receiver.got(1), what="the webhook")
        assert delivery.verified(secret)["status"] == "REVOKED"
        assert delivery.headers["webhook-id"] == task_id


def test_settings_the_environment_gives_are_kept(tmp_path: Path) -> None:
    given = fast_settings(
        webhook_secret=SecretStr(GIVEN),
        artifacts_dir=tmp_path / "mine",
        database_url=f"sqlite:///{tmp_path / 'mine.db'}",
    )
    stack = Stack(given, use_given_redis=False, workdir=tmp_path)  # not started

    assert stack._own_defaults() == {}
    assert stack.generated_secret is None


def test_unset_settings_get_the_stacks_own(tmp_path: Path) -> None:
    stack = Stack(fast_settings(webhook_secret=SecretStr("")), workdir=tmp_path)  # not started

    defaults = stack._own_defaults()

    assert defaults["artifacts_dir"] == tmp_path / "artifacts"
    assert defaults["database_url"] == f"sqlite:///{tmp_path / 'fairgpu.db'}"
    assert stack.generated_secret is not None
    assert defaults["webhook_secret"] == SecretStr(stack.generated_secret)
