"""What becomes of the files a job leaves in its output folder (ctx.output_dir): once it has
succeeded they are checked (their total against MAX_ARTIFACT_BYTES, their names) and stored as
its artifacts, all of them or none; whatever the end, the folder is deleted afterwards."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from app.artifacts import ArtifactStore, check_name


class ArtifactsError(Exception):
    """The job's files cannot be kept (over the size cap, a name refused, the store failed);
    the message says why. The job ends as a FAILURE."""


@dataclass(frozen=True)
class Artifact:
    """One file of the job's: its name (a relative POSIX path), size and SHA-256."""

    name: str
    size: int
    sha256: str


def store_outputs(store: ArtifactStore, job_id: str, folder: Path, cap: int) -> list[Artifact]:
    """Store every file in the folder as the job's artifact; ArtifactsError (none stored) when
    they add up to more than cap bytes or a name is refused."""
    files = sorted(_files(folder))
    total = sum(path.stat().st_size for _, path in files)
    if total > cap:
        raise ArtifactsError(
            f"the job left {total} bytes of files in ctx.output_dir, over the limit of {cap} "
            "bytes (MAX_ARTIFACT_BYTES)"
        )
    for name, _ in files:
        try:
            check_name(name)
        except ValueError as exc:
            raise ArtifactsError(f"the job left a file whose name is refused: {exc}") from exc
    stored = []
    for name, path in files:
        try:
            stored.append(_put(store, job_id, name, path))
        except Exception as exc:
            with contextlib.suppress(Exception):
                store.delete(job_id)  # none rather than some: the job fails
            raise ArtifactsError(f"the artifact {name!r} could not be stored: {exc}") from exc
    return stored


def as_json(artifacts: list[Artifact]) -> str:
    """The artifacts as the job's record keeps them: [{"name", "size", "sha256"}]."""
    return json.dumps([asdict(artifact) for artifact in artifacts])


def _put(store: ArtifactStore, job_id: str, name: str, path: Path) -> Artifact:
    with path.open("rb") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
    size = path.stat().st_size
    store.put(job_id, name, path)
    return Artifact(name, size, digest)


def _files(folder: Path) -> Iterator[tuple[str, Path]]:
    """(name, path) of each regular file under the folder; links are not followed (a job's
    link could point anywhere on the worker's machine) nor kept."""
    for root, _, names in os.walk(folder):
        for file_name in names:
            path = Path(root, file_name)
            if stat.S_ISREG(path.lstat().st_mode):
                yield path.relative_to(folder).as_posix(), path
