"""Serve the API with uvicorn: `uv run main.py` or `python -m app.serve`.

With API_WORKERS above 1, uvicorn's supervisor runs that many processes on the one port (and
starts a new one when one dies); each builds its own app, Redis pools and event subscription
from the same environment, so any of them can serve any request or stream.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import uvicorn

from app import logs
from app.api.http_protocol import HeadBoundProtocol
from app.settings import Settings, get_settings

if TYPE_CHECKING:
    from fastapi import FastAPI

#: What each of uvicorn's worker processes imports and calls to build its app.
APP_FACTORY = "app.api.serve:app_from_environment"


def app_from_environment() -> FastAPI:
    """The app of one API process: its settings and logging from the environment."""
    # Imported here: uvicorn's supervisor, which runs main() with API_WORKERS above 1, serves
    # nothing and need not load the app (some 75 MB), only the processes it starts do.
    from app.api.factory import create_app

    settings = get_settings()
    _configure_logs(settings)
    app = create_app(settings)
    _freeze_start_up()
    return app


def main() -> None:
    """Serve the API on HOST:PORT with the settings from the environment."""
    settings = get_settings()
    several = settings.api_workers > 1
    if several:
        _configure_logs(settings)  # the supervisor's own records; each worker sets up its own
    uvicorn.run(
        APP_FACTORY if several else app_from_environment(),
        factory=several,
        http=HeadBoundProtocol,  # httptools, with a bound on each request's head
        workers=settings.api_workers,
        host=settings.host,
        port=settings.port,
        log_config=None,  # uvicorn's records go to the handler logs.configure installed
        log_level=settings.log_level.lower(),
        access_log=settings.access_log,
    )


def _freeze_start_up() -> None:
    """Put what start-up built (the modules, their classes and functions, the app) out of the
    garbage collector's sight. A full collection then walks only what serving has made since,
    instead of the whole heap: some 20 ms on 2 cores, during which every request in flight
    waited (the API's p99). Those objects live as long as the process, so none is lost."""
    gc.collect()  # the garbage of start-up first, so that it is not kept for good
    gc.freeze()


def _configure_logs(settings: Settings) -> None:
    logs.configure(settings.log_format, settings.log_level, access_log=settings.access_log)


if __name__ == "__main__":
    main()
