"""A job's checkpoint (ctx.checkpoint_dir): it belongs to the job, not to one run, so what a
run leaves in it is there at the next run's start, kept where the artifacts are (app/artifacts.py)
but apart from them: never listed, served or counted against MAX_ARTIFACT_BYTES.

    local   ARTIFACTS_DIR/checkpoints/<job id>/<n>-<lease token>/: each run writes a copy of its
            own, the n-th of the job, named by its lease token, made at its start from the
            newest copy (open) and used in place; once a run has ended, keep() removes the
            copies older than its own
    S3      prefix/checkpoints/<job id>/<name>: open() downloads them into a fresh temporary
            folder, keep() uploads what the folder holds when the run has ended (if its lease
            still held: a run that lost it uploads nothing), deletes the objects it no longer
            holds, and removes the folder

So a checkpoint is written by one run at a time: a stale run (its worker frozen or cut off, its
job rerun elsewhere) writes only its own copy, never the one its rerun reads. The newest copy is
the one a run starts from: the copy of the run that started last, which began as a copy of the
newest before it, so no progress a run checkpointed is thrown away. Every copy there is complete
when a run starts: runs of one job never overlap (a run that cannot renew its lease stops before
it lapses: app/worker/watchdog.py), and a job writes each file whole (write, then rename:
docs/jobs.md), so a lost run's copy holds whole files up to its last write and counts as any.
A copy that cannot be read (replaced by a link) is passed over for the one before it.

A run that leaves more than MAX_CHECKPOINT_BYTES fails (CheckpointTooBigError), and its copy is
removed. The service removes a job's checkpoint at the job's end (forget), and its sweep removes
any left once the job's record is gone (Service.sweep_checkpoints). Every method blocks.

What is kept is regular files, in folders. Anything else (a link, wherever it leads; a FIFO; a
name check_name refuses) is refused: removed from the folder, and named by the CheckpointError
that keep() raises once the rest is kept, so that both stores end holding the same files.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from app.artifacts import (
    CHECKPOINTS,
    ArtifactStore,
    BadNameError,
    LocalArtifacts,
    check_name,
    open_artifacts,
)
from app.settings import Settings
from app.worker import copies
from app.worker.copies import discard as _discard
from app.worker.copies import survey as _survey
from app.worker.outputs import open_file

_FOLDER = copies.FOLDER
#: The refused names a CheckpointError spells out; the rest are counted.
_NAMED = 5
#: Bytes read at a time from a stored file.
_CHUNK = 1 << 20


class CheckpointError(Exception):
    """A checkpoint that could not be kept or opened as it is: names that would leave the folder
    (a link, `..`), files of another kind, a folder replaced by a link. The message says which."""


class CheckpointTooBigError(CheckpointError):
    """A run left more than MAX_CHECKPOINT_BYTES in its checkpoint: nothing of it was kept."""


class Checkpoints:
    """The jobs' checkpoint folders, kept by an artifact store: in place in a local folder, or
    copied to and from S3 around each run."""

    def __init__(self, store: ArtifactStore, max_bytes: int | None = None) -> None:
        self.area = store.within(CHECKPOINTS)
        self.max_bytes = max_bytes  # MAX_CHECKPOINT_BYTES; None: no bound

    @property
    def in_place(self) -> bool:
        """Whether a run writes its copy where it is kept (a local store): a lost run's
        checkpoint is then there for its rerun."""
        return isinstance(self.area, LocalArtifacts)

    def open(self, job_id: str, token: str) -> Path:
        """An existing folder on this host, the run's own, that holds what the job's runs left
        (empty for its first run); keep() it once the run has ended, whatever its end."""
        if isinstance(self.area, LocalArtifacts):
            return copies.start(self.area.folder(job_id), token)
        folder = Path(tempfile.mkdtemp(prefix="fairgpu-checkpoint-"))
        try:
            for name in self.area.names(job_id):
                self._fetch(job_id, name, folder)
        except BaseException:
            _discard(folder)
            raise
        return folder

    def keep(self, job_id: str, folder: Path, *, held: bool = True) -> None:
        """Make the job's checkpoint what the folder holds now (subfolders too); then an S3
        folder is removed. `held`: whether the run still held its lease (S3 keeps nothing of a
        run that may have lost it: its rerun owns the checkpoint). CheckpointError names what
        was refused, after the rest is kept; CheckpointTooBigError says nothing was."""
        in_place = isinstance(self.area, LocalArtifacts)
        try:
            refused = self._keep(job_id, folder, in_place) if in_place or held else []
        except CheckpointTooBigError:
            _discard(folder)
            raise
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
                self._bound(job_id, root, kept)
                if in_place:
                    copies.kept(folder)
                else:
                    kept = self._upload(job_id, root, kept)
        finally:
            if root is not None:
                os.close(root)
        if not in_place:
            stale = set(self.area.names(job_id)) - set(kept)
            self.area.remove(job_id, sorted(stale))
        return refused

    def _bound(self, job_id: str, root: int, names: list[str]) -> None:
        """CheckpointTooBigError when the files come to more than max_bytes."""
        if self.max_bytes is None:
            return
        total = sum(copies.size_of(root, name) for name in names)
        if total > self.max_bytes:
            raise CheckpointTooBigError(
                f"the job left {total} bytes in ctx.checkpoint_dir, over the limit of "
                f"{self.max_bytes} bytes (MAX_CHECKPOINT_BYTES)"
            )

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
    """The checkpoints kept by the artifact store the settings name, bounded as they say."""
    return Checkpoints(open_artifacts(settings), settings.max_checkpoint_bytes)
