"""A project's archive: a .tar.gz of regular files and folders, checked whole before anything of
it is trusted, and unpacked with its modes normalised.

check() reads every member's header (never its data beyond what gzip must inflate to reach the
next header) and refuses, naming the member: an absolute path, a `..`, a link (symbolic or hard),
a device file or fifo, a duplicate name (a file after a folder of the same name included), and
an archive over its bounds on members or unpacked bytes. unpack() checks first, then writes
each member itself (no tarfile extraction: nothing of the archive's own modes, owners or times
is applied), so a checked archive is all it can write.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

#: Modes as unpacked: a file with any execute bit is executable by all, others readable by all.
FILE_MODE = 0o644
EXECUTABLE_MODE = 0o755
FOLDER_MODE = 0o755
#: Bytes copied per read while unpacking.
CHUNK_BYTES = 1 << 20
#: Inflated bytes an archive may have beyond its members' data: each member's headers (a long
#: name's among them) and the end's padding. Past it, reading stops: a gzip bomb inflates no more.
HEADER_ALLOWANCE = 64 * 1024
SLACK_BYTES = 1 << 20


class BadArchiveError(ValueError):
    """An archive that is not a .tar.gz, or holds what a project may not; says which member."""


@dataclass(frozen=True)
class Bounds:
    """What one archive may hold, unpacked."""

    max_members: int
    max_unpacked_bytes: int


@dataclass(frozen=True)
class Member:
    """One checked member: its name (relative, normalised), whether a folder, its size, and
    whether it is executable."""

    name: str
    folder: bool
    size: int
    executable: bool


def check(path: Path, bounds: Bounds) -> list[Member]:
    """The archive's members once each is known to be allowed; BadArchiveError otherwise."""
    with _opened(path, bounds) as archive:
        return _members(archive, bounds)


@contextmanager
def _opened(path: Path, bounds: Bounds) -> Iterator[tarfile.TarFile]:
    """The archive as a stream of members (read once, in order), its inflation capped; what
    cannot be read as a .tar.gz is a BadArchiveError."""
    cap = bounds.max_unpacked_bytes + bounds.max_members * HEADER_ALLOWANCE + SLACK_BYTES
    try:
        with (
            gzip.open(path, "rb") as inflated,
            tarfile.open(fileobj=_Capped(inflated, cap), mode="r|") as archive,
        ):
            yield archive
    except (tarfile.TarError, zlib.error, gzip.BadGzipFile, EOFError) as exc:
        raise BadArchiveError(f"not a readable .tar.gz: {exc}") from None


class _Capped(io.BufferedIOBase):
    """A reader that refuses to give more than `cap` bytes in all."""

    def __init__(self, source: gzip.GzipFile, cap: int) -> None:
        super().__init__()
        self.source = source
        self.left = cap

    def readable(self) -> bool:
        """It is read from."""
        return True

    def read(self, size: int | None = -1, /) -> bytes:
        """Up to `size` bytes; BadArchiveError once the cap would be passed."""
        want = self.left + 1 if size is None or size < 0 else min(size, self.left + 1)
        data = self.source.read(want)
        self.left -= len(data)
        if self.left < 0:
            raise BadArchiveError("inflates to more than its bounds allow")
        return data


def _members(archive: tarfile.TarFile, bounds: Bounds) -> list[Member]:
    members: list[Member] = []
    seen: set[str] = set()
    unpacked = 0
    for info in archive:  # iterating reads one header at a time, as the stream goes
        if len(members) >= bounds.max_members:
            raise BadArchiveError(f"more than {bounds.max_members} members")
        name = _name(info.name)
        if name == "." and not info.isdir():
            raise BadArchiveError(f"{info.name!r}: the project's own folder, as a file")
        if info.issym() or info.islnk():
            raise BadArchiveError(f"{info.name!r}: a link; only files and folders are allowed")
        if not (info.isfile() or info.isdir()):
            raise BadArchiveError(f"{info.name!r}: a device, fifo or other special file")
        if name in seen:
            raise BadArchiveError(f"{info.name!r}: a duplicate name")
        seen.add(name)
        unpacked += info.size
        if unpacked > bounds.max_unpacked_bytes:
            raise BadArchiveError(f"more than {bounds.max_unpacked_bytes} bytes unpacked")
        executable = bool(info.mode & 0o111)
        members.append(Member(name, info.isdir(), info.size, executable))
    _no_file_as_folder(members)
    return members


def _name(raw: str) -> str:
    """A member's name, relative and normalised ("./a//b/" -> "a/b"); BadArchiveError for an
    absolute one, one with `..`, a backslash or a control character, or an empty one."""
    if raw.startswith("/") or "\\" in raw or any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise BadArchiveError(f"{raw!r}: not a relative name inside the project")
    parts = [part for part in PurePosixPath(raw).parts if part != "."]
    if ".." in parts:
        raise BadArchiveError(f"{raw!r}: a '..' in its name")
    if not parts:
        return "."  # the project's own folder ("./"): allowed once, as a folder
    return "/".join(parts)


def _no_file_as_folder(members: list[Member]) -> None:
    """Refuse a member under a name that another member has as a regular file ("a" then "a/b")."""
    files = {member.name for member in members if not member.folder}
    for member in members:
        parent = PurePosixPath(member.name).parent
        while str(parent) != ".":
            if str(parent) in files:
                raise BadArchiveError(f"{member.name!r}: inside {str(parent)!r}, a file")
            parent = parent.parent


def unpack(path: Path, target: Path, bounds: Bounds) -> list[Member]:
    """Check the archive, then write its members under `target` (an empty or missing folder)
    with normalised modes; the members written."""
    members = check(path, bounds)
    target.mkdir(parents=True, exist_ok=True)
    os.chmod(target, FOLDER_MODE)
    checked = {member.name: member for member in members}
    with _opened(path, bounds) as archive:
        for info in archive:
            member = checked[_name(info.name)]
            place = target / member.name
            if member.folder:
                place.mkdir(parents=True, exist_ok=True)
            else:
                place.parent.mkdir(parents=True, exist_ok=True)
                _write(archive, info, place, EXECUTABLE_MODE if member.executable else FILE_MODE)
    for folder, _, _ in os.walk(target):  # those named and those made as parents alike
        os.chmod(folder, FOLDER_MODE)
    return members


def _write(archive: tarfile.TarFile, info: tarfile.TarInfo, place: Path, mode: int) -> None:
    """One file's bytes, created new (O_EXCL: nothing already there is followed or replaced)."""
    source = archive.extractfile(info)
    if source is None:  # a regular file always has its data; checked above
        raise BadArchiveError(f"{info.name!r}: no data")
    handle = os.open(place, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with source, open(handle, "wb", closefd=True) as copy:
        while chunk := source.read(CHUNK_BYTES):
            copy.write(chunk)
    os.chmod(place, mode)  # the umask may have taken bits off
