"""Serve the API with uvicorn: `uv run main.py` or `python -m app.serve`."""

from __future__ import annotations

import uvicorn

from app import logs
from app.api import create_app
from app.settings import get_settings


def main() -> None:
    """Serve the API on HOST:PORT with the settings from the environment."""
    settings = get_settings()
    logs.configure(settings.log_format, settings.log_level)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,  # uvicorn's records go to the handler logs.configure installed
        log_level=settings.log_level.lower(),
        access_log=settings.access_log,
    )


if __name__ == "__main__":
    main()
