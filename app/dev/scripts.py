"""What the dev stack gives script jobs (docs/scripts.md): a cache of built environments of its
own, so that a stack (a test's, or one `fairgpu dev` run) never shares the host's cache, nor
leaves anything in it.

The cache lies in a new folder of the system's temporary folder, not under the stack's workdir:
a script's sandbox runs as an unprivileged user (docs/security.md), which must reach the
environments it is given, and a test's workdir lies under a folder only its owner may enter.
The folder may be entered by anyone but listed by its owner alone; it goes with the stack.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from app.settings import Settings

#: The setting that names the host's cache of built environments (SCRIPT_ENV_CACHE_DIR).
ENV_CACHE = "script_env_cache_dir"


def own_env_cache(settings: Settings) -> Path | None:
    """A new, empty folder for the stack's environments; None when the environment names one
    (SCRIPT_ENV_CACHE_DIR set: the operator's choice stands)."""
    if ENV_CACHE not in Settings.model_fields or ENV_CACHE in settings.model_fields_set:
        return None
    folder = Path(tempfile.mkdtemp(prefix="fairgpu-envs-"))
    folder.chmod(0o711)  # the sandbox's user enters it; only the stack lists it
    return folder


def remove(folder: Path | None) -> None:
    """Remove the stack's own cache (built environments, locks and all)."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
