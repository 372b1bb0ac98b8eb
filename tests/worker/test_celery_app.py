"""The Celery app's settings that follow from the service's own (app/worker/celery_app.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings
from app.worker.celery_app import create_celery
from tests.support import FIXTURES


@pytest.mark.parametrize("max_long_s", [3000, 20_000])
def test_the_visibility_timeout_outlasts_the_longest_job(max_long_s: float) -> None:
    settings = Settings(users_file=FIXTURES, max_long_s=max_long_s)
    app = create_celery(settings)
    try:
        timeout = app.conf.broker_transport_options["visibility_timeout"]
    finally:
        app.close()
    assert timeout == settings.broker_visibility_s > max_long_s


@pytest.mark.parametrize(
    ("raw", "queues"),
    [("short", ["short"]), ("long", ["long"]), (" short , long ", ["short", "long"])],
)
def test_worker_queues_is_a_list_read_from_a_comma_separated_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str, queues: list[str]
) -> None:
    monkeypatch.setenv("WORKER_QUEUES", raw)
    assert Settings(users_file=FIXTURES).worker_queues == queues


@pytest.mark.parametrize("raw", ["", "medium", "short,gpu", ","])
def test_an_unknown_or_empty_worker_queue_is_refused(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("WORKER_QUEUES", raw)
    with pytest.raises(ValidationError, match="worker_queues"):
        Settings(users_file=FIXTURES)
