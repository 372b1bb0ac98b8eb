"""Logging of the API and the workers: one JSON object per line on stderr (or plain text).

Each line has time, level, logger and message, plus whatever the call passed in `extra`: the
job's `task_id` and the `account` it belongs to, or an admin's action. Keys are never logged.
"""

from __future__ import annotations

import logging
from typing import Literal

from pythonjsonlogger.json import JsonFormatter

LogFormat = Literal["json", "text"]
TEXT = "%(asctime)s %(levelname)s %(name)s %(message)s"
#: uvicorn's loggers, routed to the root handler instead of their own.
UVICORN = ("uvicorn", "uvicorn.error", "uvicorn.access")


def configure(log_format: LogFormat, level: str = "INFO", *, access_log: bool = True) -> None:
    """Send every log record of this process to stderr in log_format (uvicorn's line per HTTP
    request only with access_log: uvicorn writes it only while that logger reaches a handler)."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(
            JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s",
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            )
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in UVICORN:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = access_log or name != "uvicorn.access"
