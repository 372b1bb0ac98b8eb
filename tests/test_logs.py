"""app/logs.py: one JSON object per line, with the job's task id and account."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from app import logs


@pytest.fixture
def restored() -> Iterator[None]:
    """Put the root logger and uvicorn's loggers back as they were."""
    names = [None, *logs.UVICORN]
    saved = [
        (logging.getLogger(n), logging.getLogger(n).handlers[:], logging.getLogger(n).level)
        for n in names
    ]
    propagate = {n: logging.getLogger(n).propagate for n in logs.UVICORN}
    yield
    for logger, handlers, level in saved:
        logger.handlers[:] = handlers
        logger.setLevel(level)
    for n, value in propagate.items():
        logging.getLogger(n).propagate = value


def test_a_job_event_is_one_json_line_with_its_task_id_and_account(
    restored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("json", "INFO")

    logging.getLogger("app.wiring.service").info(
        "job started", extra={"task_id": "t-1", "account": "acct-1", "attempt": 2}
    )

    (line,) = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert record["message"] == "job started"
    assert record["level"] == "INFO"
    assert record["logger"] == "app.wiring.service"
    assert (record["task_id"], record["account"], record["attempt"]) == ("t-1", "acct-1", 2)
    assert "time" in record


def test_records_below_the_level_are_not_written(
    restored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("json", "WARNING")

    logging.getLogger("app").info("quiet")
    logging.getLogger("app").warning("loud")

    lines = capsys.readouterr().err.splitlines()
    assert [json.loads(line)["message"] for line in lines] == ["loud"]


def test_uvicorns_records_go_through_the_same_json_handler(
    restored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logging.getLogger("uvicorn.access").addHandler(logging.NullHandler())
    logs.configure("json", "INFO")

    logging.getLogger("uvicorn.access").info("GET /health 200")

    (line,) = capsys.readouterr().err.splitlines()
    assert json.loads(line)["logger"] == "uvicorn.access"


def test_without_access_log_uvicorn_finds_no_handler_for_its_request_lines(
    restored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # uvicorn writes a line per request only while uvicorn.access reaches a handler; an API
    # process under API_WORKERS sets its logging up after uvicorn did, so this must hold there.
    logs.configure("json", "INFO", access_log=False)

    assert not logging.getLogger("uvicorn.access").hasHandlers()
    logging.getLogger("uvicorn.error").info("started")
    (line,) = capsys.readouterr().err.splitlines()
    assert json.loads(line)["logger"] == "uvicorn.error"


def test_text_format_writes_plain_lines(restored: None, capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("text", "INFO")

    logging.getLogger("app").info("hello")

    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("INFO app hello")
