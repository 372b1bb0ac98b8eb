"""What becomes of the files a job leaves in its output folder (ctx.output_dir): once it has
succeeded they are checked (their total against MAX_ARTIFACT_BYTES, their names) and stored as
its artifacts, all of them or none; whatever the end, the folder is deleted afterwards.

A process of the job's may still be at work in the folder, swapping a file or a folder for a
link between our look and our read, so no path is followed: the folder is opened without
following a link, each folder under it relative to its parent's descriptor the same way, and
each file too; a file is kept only if that descriptor is a regular file's, and it is hashed and
stored from that descriptor in one read.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.artifacts import MAX_NAME, ArtifactStore, check_name

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

#: A folder, opened where it is: a link in its place is an error (ELOOP), not followed.
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: A file likewise; O_NONBLOCK so that a FIFO put in its place cannot hold open() forever.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: What open() says when a name no longer leads to a folder or a regular file of the job's.
_GONE = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENXIO}


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
    try:
        with opened_folder(folder) as root:
            if root is None:
                return []
            listed = listing(root)
            _check(listed, cap)
            return store_listed(store, job_id, root, listed, cap)
    except OSError as exc:  # a folder the job made unreadable, say
        raise ArtifactsError(f"ctx.output_dir could not be read: {exc}") from exc


def as_json(artifacts: list[Artifact]) -> str:
    """The artifacts as the job's record keeps them: [{"name", "size", "sha256"}]."""
    return json.dumps([asdict(artifact) for artifact in artifacts])


@contextlib.contextmanager
def opened_folder(folder: Path) -> Iterator[int | None]:
    """A descriptor of the output folder, opened without following a link; None when there is
    no folder. ArtifactsError when a link or a file took its place."""
    try:
        fd = os.open(folder, _FOLDER)
    except FileNotFoundError:
        yield None
        return
    except OSError as exc:
        if exc.errno not in _GONE:
            raise
        raise ArtifactsError("ctx.output_dir was replaced by a link or a file") from None
    try:
        yield fd
    finally:
        os.close(fd)


def listing(root: int) -> list[tuple[str, int]]:
    """(name, size) of each regular file under the folder `root` is a descriptor of, by name;
    links, wherever they are, are neither followed nor kept."""
    found: list[tuple[str, int]] = []
    _walk(root, "", found)
    return sorted(found)


def _walk(folder: int, prefix: str, found: list[tuple[str, int]]) -> None:
    with os.scandir(folder) as entries:
        for entry in entries:
            name = prefix + entry.name
            info = entry.stat(follow_symlinks=False)  # fstatat relative to the folder
            if stat.S_ISREG(info.st_mode):
                found.append((name, info.st_size))
            elif stat.S_ISDIR(info.st_mode):
                if len(name) >= MAX_NAME:  # each level holds a descriptor: stop before many
                    raise ArtifactsError(f"the job left folders nested past {MAX_NAME} characters")
                inner = _open_at(folder, entry.name, _FOLDER)
                if inner is not None:
                    try:
                        _walk(inner, name + "/", found)
                    finally:
                        os.close(inner)


def open_file(root: int, name: str) -> int | None:
    """A descriptor of the regular file `name` under the folder `root` is a descriptor of,
    reached without following a link at any level; None when it is gone or no longer a regular
    file (a link, a folder, a FIFO put in its place, or in the place of a folder above it)."""
    *folders, base = name.split("/")
    opened: list[int] = []
    try:
        at = root
        for folder in folders:
            inner = _open_at(at, folder, _FOLDER)
            if inner is None:
                return None
            opened.append(inner)
            at = inner
        fd = _open_at(at, base, _FILE)
    finally:
        for inner in opened:
            os.close(inner)
    if fd is not None and not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def store_listed(
    store: ArtifactStore, job_id: str, root: int, listed: list[tuple[str, int]], cap: int
) -> list[Artifact]:
    """Store each listed file that is still a regular file, from its descriptor; all or none
    (ArtifactsError), and no more than cap bytes in all, however the files grew since."""
    stored: list[Artifact] = []
    for name, _ in listed:
        try:
            artifact = _put(store, job_id, root, check_name(name), cap)
        except Exception as exc:
            with contextlib.suppress(Exception):
                store.delete(job_id)  # none rather than some: the job fails
            if isinstance(exc, ArtifactsError):
                raise
            raise ArtifactsError(f"the artifact {name!r} could not be stored: {exc}") from exc
        if artifact is not None:
            stored.append(artifact)
            cap -= artifact.size
    return stored


def _check(listed: list[tuple[str, int]], cap: int) -> None:
    total = sum(size for _, size in listed)
    if total > cap:
        raise ArtifactsError(
            f"the job left {total} bytes of files in ctx.output_dir, over the limit of {cap} "
            "bytes (MAX_ARTIFACT_BYTES)"
        )
    for name, _ in listed:
        try:
            check_name(name)
        except ValueError as exc:
            raise ArtifactsError(f"the job left a file whose name is refused: {exc}") from exc


def _put(store: ArtifactStore, job_id: str, root: int, name: str, most: int) -> Artifact | None:
    fd = open_file(root, name)
    if fd is None:
        return None
    through = _Through(fd, most)
    with io.BufferedReader(through) as source:  # closing it closes the descriptor
        store.put(job_id, name, source)
    return Artifact(name, through.size, through.digest.hexdigest())


def _open_at(folder: int, name: str, flags: int) -> int | None:
    try:
        return os.open(name, flags, dir_fd=folder)
    except OSError as exc:
        if exc.errno in _GONE:
            return None
        raise


class _Through(io.RawIOBase):
    """A file's descriptor, read once from start to end: what passes is counted and hashed,
    and more than `most` bytes is an ArtifactsError (a file that grew since the listing)."""

    def __init__(self, fd: int, most: int) -> None:
        self._fd = fd
        self._most = most
        self.size = 0
        self.digest = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        view = memoryview(buffer).cast("B")
        chunk = os.read(self._fd, len(view))
        self.size += len(chunk)
        if self.size > self._most:
            raise ArtifactsError(
                "the job's files grew past MAX_ARTIFACT_BYTES while they were being stored"
            )
        self.digest.update(chunk)
        view[: len(chunk)] = chunk
        return len(chunk)

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()
