"""The script runner of a worker's job child, made from its settings (the `script` type's setup)."""

from __future__ import annotations

from app.artifacts import open_artifacts
from app.code.store import AREA, CodeStore
from app.connections import async_client
from app.scripting.run import ScriptRunner
from app.settings import Settings, get_settings


def runner_from_settings(settings: Settings | None = None) -> ScriptRunner:
    """A ScriptRunner that fetches code from the artifacts' store, as POST /code keeps it.

    The store's Redis client is never used by a fetch (which reads the archive alone) and opens
    no connection."""
    settings = settings or get_settings()
    code = CodeStore(open_artifacts(settings).within(AREA), async_client(settings))
    return ScriptRunner(settings, code.fetch)
