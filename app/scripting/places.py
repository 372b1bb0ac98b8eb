"""Where a script run's files live on the host, and who owns them while it runs.

Every folder the sandbox binds is opened by the sandbox's user (uid 65534 when the worker is
root), so each must be reachable by it: every folder above it traversable by others (`o+x`), the
folder itself that user's while the run writes there. A run's own folder is made under a root
of 0711 folders (SCRIPT_WORK_DIR); the worker's artifacts and checkpoint folders are not moved:
their parents owned by the worker get `o+x` (traverse, never list or read), and the folders
themselves are handed over for the run and given back after it.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A root the run folders live under: any user may pass through, none may list it.
TRAVERSE_ONLY = 0o711
#: The name of the output file a script may write, in its working folder.
OUTPUT_NAME = ".fairgpu-output.json"


def default_root(name: str) -> Path:
    """A folder of ours in the system's temporary folder (no user's home)."""
    return Path(tempfile.gettempdir()) / name


def prepare_root(path: Path, *, shared: bool = False) -> Path:
    """`path` made (parents too) or found, and made passable by the sandbox's user: 0711 when it
    is this uid's, every folder above it that is this uid's `o+x`. A `shared` path (in the
    system's temporary folder, where any user may make it first) must be a real folder of this
    uid's: another's could be swapped under us."""
    path.mkdir(parents=True, exist_ok=True)
    found = os.lstat(path)
    if not stat.S_ISDIR(found.st_mode):
        raise RuntimeError(f"{path} is not a folder")
    if found.st_uid == os.geteuid():
        os.chmod(path, TRAVERSE_ONLY)
    elif shared:
        raise RuntimeError(f"{path} is another user's folder: choose another place")
    traversable(path)
    return path


def traversable(path: Path) -> None:
    """Give others the right to pass through each folder above `path` that this uid owns and
    that lacks it (a worker's 0700 temporary folder): traverse only, never read. A folder of
    another owner without it is left as it is; the sandbox then says it cannot reach `path`."""
    if os.geteuid() != 0:
        return  # the run has the worker's own uid: it reaches what the worker reaches
    for parent in path.absolute().parents:
        found = os.stat(parent)
        if found.st_uid == os.geteuid() and not found.st_mode & stat.S_IXOTH:
            os.chmod(parent, stat.S_IMODE(found.st_mode) | stat.S_IXOTH)


@dataclass(frozen=True)
class RunFolder:
    """One run's own folder: the project's working folder in it, and the archive beside it."""

    top: Path

    @property
    def work(self) -> Path:
        """The working folder: the project, unpacked; the script's HOME and current folder."""
        return self.top / "work"

    @property
    def archive(self) -> Path:
        """Where the code's archive is fetched to (never in reach of the script)."""
        return self.top / "code.tar.gz"

    @property
    def output(self) -> Path:
        """FAIRGPU_OUTPUT: the file the script may write its output to."""
        return self.work / OUTPUT_NAME

    @classmethod
    def make(cls, root: Path, task_id: str) -> RunFolder:
        """A fresh folder for one run under `root` (made 0711 if missing), named after this
        process, so that the folders of a process that died (killed with its run) are found."""
        prepare_root(root)  # made again if a cleaner of temporary files took it
        top = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-{task_id[:32]}-", dir=root))
        os.chmod(top, TRAVERSE_ONLY)
        return cls(top)

    def remove(self) -> None:
        """Remove the folder and all the run left there (links are removed, never followed)."""
        shutil.rmtree(self.top, ignore_errors=True)


def sweep_dead(root: Path) -> list[Path]:
    """Remove the run folders under `root` whose process is gone (a job child killed with its
    run never removes its own); those removed."""
    removed = []
    for entry in root.iterdir() if root.is_dir() else ():
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def sweep_older(folder: Path, seconds: float) -> list[Path]:
    """Remove what under `folder` has not changed hands or modes for `seconds` (a build's
    workspace left by a child killed mid-build: a live build is never older than its time
    limit, and its workspace's ctime is its start's); those removed."""
    removed = []
    cutoff = time.time() - seconds
    for entry in folder.iterdir() if folder.is_dir() else ():
        if os.lstat(entry).st_ctime < cutoff:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    return True


def give_back(*folders: Path) -> None:
    """Make what a run left in its folders the worker's again (when the worker is root and the
    run was not), so the worker reads, uploads and deletes them as its own; links are changed,
    never followed."""
    if os.geteuid() != 0:
        return
    uid, gid = os.geteuid(), os.getegid()
    for top in folders:
        if not top.exists():
            continue
        os.lchown(top, uid, gid)
        for root, dirs, files in os.walk(top):
            for name in (*dirs, *files):
                os.lchown(os.path.join(root, name), uid, gid)


def readable_by_all(top: Path) -> None:
    """Every folder under `top` traversable and listable, every file readable, by every user
    (a built environment, whatever umask its build had); links are left alone."""
    for root, _, files in os.walk(top):  # each folder comes as a root in turn
        os.chmod(root, stat.S_IMODE(os.lstat(root).st_mode) | 0o555)  # noqa: S103 (read by all)
        for name in files:
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(path, stat.S_IMODE(mode) | 0o444)


class OutputError(ValueError):
    """The output file a script left is not a regular file of JSON within its bound."""


def read_output(path: Path, max_bytes: int) -> Any:
    """The JSON value a script wrote to its output file; None when it wrote none. Opened
    without following a link, nor waiting on a fifo; `OutputError` for anything but a regular
    file of at most `max_bytes` bytes of JSON."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        handle = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise OutputError("FAIRGPU_OUTPUT is a link: write the output file itself") from None
        raise OutputError(f"FAIRGPU_OUTPUT cannot be opened: {error.strerror}") from None
    with open(handle, "rb", closefd=True) as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            raise OutputError("FAIRGPU_OUTPUT is not a regular file")
        data = source.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OutputError(
            f"the output file is over {max_bytes} bytes (MAX_OUTPUT_BYTES): keep large results "
            "in FAIRGPU_ARTIFACTS_DIR and write a reference"
        )
    try:
        return json.loads(data)
    except ValueError as error:  # JSONDecodeError, and bytes that are not UTF-8
        raise OutputError(f"the output file is not JSON: {error}") from None
