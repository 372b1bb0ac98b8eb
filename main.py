"""The fairgpu API: `uv run main.py` serves it with uvicorn on HOST:PORT (see README)."""

from __future__ import annotations

import uvicorn

from app.api import create_app
from app.settings import get_settings


def main() -> None:
    """Serve the API with the settings from the environment."""
    settings = get_settings()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")


if __name__ == "__main__":
    main()
