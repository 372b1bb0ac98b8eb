"""Serve the API with uvicorn: `uv run main.py` or `python -m app.serve`."""

from __future__ import annotations

import uvicorn

from app.api import create_app
from app.settings import get_settings


def main() -> None:
    """Serve the API on HOST:PORT with the settings from the environment."""
    settings = get_settings()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")


if __name__ == "__main__":
    main()
