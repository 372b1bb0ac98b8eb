"""A job's checkpoint folder (ctx.checkpoint_dir): it belongs to the job, not to one run, so what
a run leaves in it is there at the next run's start, kept where the artifacts are (app/artifacts.py)
but apart from them: never listed, served or counted against MAX_ARTIFACT_BYTES.

    local   ARTIFACTS_DIR/checkpoints/<job id>/, used in place by every run
    S3      prefix/checkpoints/<job id>/<name>: open() downloads them into a fresh temporary
            folder, keep() uploads what the folder holds when the run has ended, deletes the
            objects it no longer holds, and removes the folder

A run killed with its worker never reaches keep(): S3 still holds the previous run's checkpoint,
a local folder whatever the killed run wrote. The service's sweep removes a checkpoint once its
job's record is gone (Service.sweep_checkpoints). Every method blocks.

What is kept is regular files, in folders. Anything else (a link, wherever it leads; a FIFO; a
name check_name refuses) is refused: removed from the folder, and named by the CheckpointError
that keep() raises once the rest is kept, so that both stores end holding the same files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from app.artifacts import (
    CHECKPOINTS,
    MAX_NAME,
    ArtifactStore,
    BadNameError,
    LocalArtifacts,
    check_name,
    open_artifacts,
)
from app.settings import Settings
from app.worker.outputs import open_file

#: A folder, opened where it is: a link in its place is an error (ELOOP), not followed.
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: The refused names a CheckpointError spells out; the rest are counted.
_NAMED = 5
#: Bytes read at a time from a stored file.
_CHUNK = 1 << 20


class CheckpointError(Exception):
    """A checkpoint that could not be kept or opened as it is: names that would leave the folder
    (a link, `..`), files of another kind, a folder replaced by a link. The message says which."""


class Checkpoints:
    """The jobs' checkpoint folders, kept by an artifact store: in place in a local folder, or
    copied to and from S3 around each run."""

    def __init__(self, store: ArtifactStore) -> None:
        self.area = store.within(CHECKPOINTS)

    def open(self, job_id: str) -> Path:
        """An existing folder on this host that holds what the job's last run left in its own
        (empty for its first run); keep() it once the run has ended, whatever its end."""
        if isinstance(self.area, LocalArtifacts):
            folder = self.area.folder(job_id)
            if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
                _discard(folder)
            folder.mkdir(parents=True, exist_ok=True)
            os.utime(folder)  # the sweep's clock: nested writes would not change the folder's
            return folder.absolute()
        folder = Path(tempfile.mkdtemp(prefix="fairgpu-checkpoint-"))
        try:
            for name in self.area.names(job_id):
                self._fetch(job_id, name, folder)
        except BaseException:
            _discard(folder)
            raise
        return folder

    def keep(self, job_id: str, folder: Path) -> None:
        """Make the job's checkpoint what the folder holds now (subfolders too); then an S3
        folder is removed. CheckpointError names what was refused, after the rest is kept."""
        in_place = isinstance(self.area, LocalArtifacts)
        try:
            refused = self._keep(job_id, folder, in_place)
        finally:
            if not in_place:
                _discard(folder)
        if refused:
            more = f" and {len(refused) - _NAMED} more" if len(refused) > _NAMED else ""
            raise CheckpointError(
                f"the checkpoint of job {job_id} keeps regular files only, in folders, under "
                f"names an artifact could have; refused: {refused[:_NAMED]}{more}"
            )

    def forget(self, job_id: str) -> None:
        """Delete the job's checkpoint (none: nothing happens)."""
        self.area.delete(job_id)

    def _keep(self, job_id: str, folder: Path, in_place: bool) -> list[str]:
        try:
            root = os.open(folder, _FOLDER)
        except FileNotFoundError:  # the run removed the folder: it holds nothing
            root = None
        except OSError as exc:
            _discard(folder)
            raise CheckpointError(f"the checkpoint folder of job {job_id} was replaced") from exc
        kept: list[str] = []
        refused: list[str] = []
        try:
            if root is not None:
                _survey(root, "", kept, refused)
                if in_place:
                    os.utime(root)
                else:
                    kept = self._upload(job_id, root, kept)
        finally:
            if root is not None:
                os.close(root)
        if not in_place:
            stale = set(self.area.names(job_id)) - set(kept)
            self.area.remove(job_id, sorted(stale))
        return refused

    def _upload(self, job_id: str, root: int, names: list[str]) -> list[str]:
        """Put each file, read without following a link at any level; the names put."""
        put = []
        for name in names:
            fd = open_file(root, name)
            if fd is None:  # gone since the survey
                continue
            with open(fd, "rb") as source:
                self.area.put(job_id, name, source)
            put.append(name)
        return put

    def _fetch(self, job_id: str, name: str, folder: Path) -> None:
        try:
            target = folder / check_name(name)
        except BadNameError as exc:
            raise CheckpointError(f"the checkpoint of job {job_id} holds {exc}") from exc
        target.parent.mkdir(parents=True, exist_ok=True)
        stored = self.area.open(job_id, name)
        try:
            with target.open("wb") as copy:
                while chunk := stored.read(_CHUNK):
                    copy.write(chunk)
        finally:
            stored.close()


def open_checkpoints(settings: Settings) -> Checkpoints:
    """The checkpoints kept by the artifact store the settings name."""
    return Checkpoints(open_artifacts(settings))


def _survey(folder: int, prefix: str, kept: list[str], refused: list[str]) -> None:
    """Add the regular files under `folder` (a descriptor) to `kept`, by name; remove every
    other entry, adding it to `refused`. No link is followed."""
    dropped: list[tuple[str, bool]] = []
    with os.scandir(folder) as entries:
        for entry in entries:
            name = prefix + entry.name
            if entry.is_dir(follow_symlinks=False) and len(name) < MAX_NAME:
                inner = os.open(entry.name, _FOLDER, dir_fd=folder)
                try:
                    _survey(inner, name + "/", kept, refused)
                finally:
                    os.close(inner)
            elif entry.is_file(follow_symlinks=False) and _fits(name):
                kept.append(name)
            else:
                refused.append(name)
                dropped.append((entry.name, entry.is_dir(follow_symlinks=False)))
    for base, is_folder in dropped:  # a folder nested too deep for any name, or anything else
        if is_folder:
            shutil.rmtree(base, dir_fd=folder, ignore_errors=True)
        else:
            os.unlink(base, dir_fd=folder)


def _fits(name: str) -> bool:
    try:
        check_name(name)
    except BadNameError:
        return False
    return True


def _discard(path: Path) -> None:
    """Remove a folder, or the link or file in its place."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
