"""The runs' copies of a job's local checkpoint (app/worker/checkpoints.py says why there are
several): under the job's folder, `<n>-<lease token>/` is the copy of the job's n-th run. A run
starts with a copy of the newest copy it can read (start), and once it has ended the copies
older than its own go (kept). No link is followed: the files are reached as outputs.py reaches
a job's output files, and whatever is no regular file is removed (survey).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from app.artifacts import MAX_NAME, BadNameError, check_name
from app.worker.outputs import open_file

#: A folder, opened where it is: a link in its place is an error (ELOOP), not followed.
FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY = re.compile(r"^(\d+)-[A-Za-z0-9_-]+$")
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CHUNK = 1 << 20


def start(root: Path, token: str) -> Path:
    """The new run's own copy under the job's folder `root`: the next number and its lease
    token, holding the files of the newest copy there that can be read (none: empty)."""
    if not _TOKEN.match(token):
        raise ValueError(f"a lease token names a folder: {token!r} cannot")
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        discard(root)
    root.mkdir(parents=True, exist_ok=True)
    found = runs(root)
    folder = root / f"{found[-1][0] + 1 if found else 1}-{token}"
    folder.mkdir()
    for _, newest in reversed(found):
        if _copy(newest, folder):
            break
    os.utime(root)  # the sweep's clock: nested writes would not change the folder's
    return folder.absolute()


def kept(folder: Path) -> None:
    """A run has ended and its copy is kept: the copies older than it go (it holds all they
    held that the job had not removed)."""
    ours = _number(folder.name)
    for number, older in runs(folder.parent):
        if ours is not None and number < ours:
            discard(older)
    os.utime(folder.parent)


def runs(root: Path) -> list[tuple[int, Path]]:
    """The runs' copies under the job's folder, oldest first."""
    found = []
    for entry in root.iterdir():
        number = _number(entry.name)
        if number is not None:
            found.append((number, entry))
    return sorted(found)


def size_of(root: int, name: str) -> int:
    """The size of the regular file `name` under the folder `root` is a descriptor of."""
    return os.stat(name, dir_fd=root, follow_symlinks=False).st_size


def _number(name: str) -> int | None:
    found = _COPY.match(name)
    return int(found.group(1)) if found else None


def _copy(source: Path, target: Path) -> bool:
    """Copy the regular files of an earlier run's copy; False when it cannot be read (a link
    put in its place)."""
    try:
        root = os.open(source, FOLDER)
    except OSError:
        return False
    try:
        names: list[str] = []
        survey(root, "", names, [])  # (what no run may keep goes from the dead run's copy)
        for name in names:
            fd = open_file(root, name)
            if fd is None:
                continue
            path = target / name
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(fd, "rb") as read, path.open("wb") as write:
                shutil.copyfileobj(read, write, _CHUNK)
    finally:
        os.close(root)
    return True


def survey(folder: int, prefix: str, kept: list[str], refused: list[str]) -> None:
    """Add the regular files under `folder` (a descriptor) to `kept`, by name; remove every
    other entry, adding it to `refused`. No link is followed."""
    dropped: list[tuple[str, bool]] = []
    with os.scandir(folder) as entries:
        for entry in entries:
            name = prefix + entry.name
            if entry.is_dir(follow_symlinks=False) and len(name) < MAX_NAME:
                inner = os.open(entry.name, FOLDER, dir_fd=folder)
                try:
                    survey(inner, name + "/", kept, refused)
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


def discard(path: Path) -> None:
    """Remove a folder, or the link or file in its place."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
