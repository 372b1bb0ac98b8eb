"""Packing a project folder for `fairgpu run`: a `.tar.gz` of what Git would keep, in the shape
the server's POST /code accepts (regular files and folders under relative names, nothing else),
written to a temporary file as it is read and never held in memory.

What is left out:
- what the folder's `.gitignore` files leave out, the nested ones too, by Git's rules (a deeper
  file's patterns win; a folder left out is not entered, so nothing under it comes back); every
  `.git` (a folder, or the file of a worktree or submodule). Only the `.gitignore` files inside
  the folder count: not `.git/info/exclude`, nor the user's global excludes.
- `.env` and `.env.*` files, named in the notes, unless `include_env` (then they are packed even
  where a `.gitignore` leaves them out, since that is where secrets files usually are).
- symbolic links, each named in the notes: the server takes regular files only, and following
  one could pack what lies outside the project or what a `.gitignore` keeps out.
- sockets, pipes and device files, named in the notes.

The archive is deterministic, so the same files give the same SHA-256 (the server stores code
by it): names sorted, times, owners and the gzip header fixed, modes 0644, or 0755 for a file
its owner may run and for folders. A project that packs to more than `max_bytes` is refused
while packing, before anything is sent, with its biggest files named."""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pathspec import GitIgnoreSpec

from app.client.words import size

MAX_PACK_BYTES = 100 * 1024 * 1024  # the server's MAX_CODE_BYTES default
BIGGEST_SHOWN = 5  # files named when a project is too big
CHUNK = 1 << 20


class PackError(Exception):
    """A project that cannot be packed; str() is one line fit for a terminal."""


@dataclass(frozen=True)
class Packed:
    """A packed project: the archive (a temporary file the caller removes, see discard), its
    SHA-256 (hex), its size in bytes, how many files it holds, and what was left out that the
    user should know about (links, `.env` files, special files; not each ignored file)."""

    path: Path
    sha256: str
    bytes: int
    files: int
    notes: list[str] = field(default_factory=list)

    def discard(self) -> None:
        """Remove the archive (once uploaded, or when it will not be)."""
        self.path.unlink(missing_ok=True)


@dataclass
class _Plan:
    """What the walk found: the entries to pack (relative POSIX names, folders marked by a
    trailing slash), the sizes of the files, and the notes."""

    entries: list[tuple[str, Path]] = field(default_factory=list)
    sizes: list[tuple[int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ignored: int = 0

    def add_file(self, name: str, entry: os.DirEntry[str]) -> None:
        self.entries.append((name, Path(entry.path)))
        self.sizes.append((entry.stat(follow_symlinks=False).st_size, name))


class _TooBigError(Exception):
    pass


class _Sink:
    """The archive's file, counted and hashed as gzip writes it; past `limit` bytes it stops."""

    def __init__(self, raw: tempfile._TemporaryFileWrapper[bytes], limit: int) -> None:
        self.raw, self.limit = raw, limit
        self.count, self.digest = 0, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.count += len(data)
        if self.count > self.limit:
            raise _TooBigError
        self.digest.update(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def pack(
    root: Path,
    *,
    include_env: bool = False,
    max_bytes: int = MAX_PACK_BYTES,
    into: Path | None = None,
) -> Packed:
    """Pack the folder `root` into a temporary `.tar.gz` (in `into`, else the system's temporary
    folder). PackError when it is not a folder, a file cannot be read, or the archive would pass
    `max_bytes`; nothing is left behind then."""
    root = Path(root)
    if not root.is_dir():
        raise PackError(f"{root} is not a folder")
    plan = _Plan()
    _walk(root, "", [], plan, include_env)
    if plan.ignored:
        plan.notes.append(f"{plan.ignored} paths left out by .gitignore")
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept past this function on success
        prefix="fairgpu-code-", suffix=".tar.gz", dir=into, delete=False
    )
    path = Path(handle.name)
    try:
        with handle:
            sink = _Sink(handle, max_bytes)
            files = _write(sink, plan.entries)
    except _TooBigError:
        path.unlink(missing_ok=True)
        raise PackError(_too_big(plan, max_bytes)) from None
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Packed(path, sink.digest.hexdigest(), sink.count, files, plan.notes)


def _walk(
    folder: Path, prefix: str, specs: list[tuple[str, GitIgnoreSpec]], plan: _Plan, env: bool
) -> None:
    """Plan the folder `folder`, whose name in the archive is `prefix` ("" for the root, else
    ending in "/"), under the `.gitignore` specs of the folders above it (each with its own
    prefix), outermost first."""
    specs = _with_rules(folder, prefix, specs)
    try:
        children = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        raise PackError(f"cannot read the folder {prefix or '.'}: {exc.strerror}") from None
    for child in children:
        name = prefix + child.name
        if child.name == ".git":
            continue
        if child.is_symlink():
            plan.notes.append(f"{name}: a link, left out (the server takes regular files only)")
            continue
        is_dir = child.is_dir(follow_symlinks=False)
        if _is_env(child.name) and not is_dir:
            if env:
                plan.add_file(name, child)
            else:
                plan.notes.append(f"{name}: an env file, left out (include it if the job needs it)")
        elif _ignored(specs, name + "/" if is_dir else name):
            plan.ignored += 1
        elif is_dir:
            plan.entries.append((name + "/", Path(child.path)))
            _walk(Path(child.path), name + "/", specs, plan, env)
        elif child.is_file(follow_symlinks=False):
            plan.add_file(name, child)
        else:
            plan.notes.append(f"{name}: not a regular file (a socket, pipe or device), left out")


def _with_rules(
    folder: Path, prefix: str, specs: list[tuple[str, GitIgnoreSpec]]
) -> list[tuple[str, GitIgnoreSpec]]:
    """The specs in force in `folder`: those above it, and its own `.gitignore`'s if it has one
    (a link named `.gitignore` is not read, as it is not packed)."""
    rules = folder / ".gitignore"
    if not rules.is_file() or rules.is_symlink():
        return specs
    try:
        lines = rules.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError as exc:
        raise PackError(f"cannot read {prefix}.gitignore: {exc.strerror}") from None
    return [*specs, (prefix, GitIgnoreSpec.from_lines(lines))]


def _is_env(name: str) -> bool:
    return name == ".env" or name.startswith(".env.")


def _ignored(specs: list[tuple[str, GitIgnoreSpec]], name: str) -> bool:
    """Whether Git would leave `name` out: the deepest `.gitignore` with a pattern that matches
    it decides (a `!` pattern keeps it), as Git's precedence has it."""
    for prefix, spec in reversed(specs):
        verdict = spec.check_file(name[len(prefix) :]).include
        if verdict is not None:
            return verdict
    return False


def _write(sink: _Sink, entries: list[tuple[str, Path]]) -> int:
    """Write the entries, already in order, as a tar stream gzipped with a fixed header; how many
    files it holds."""
    files = 0
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name, source in entries:
            info = tarfile.TarInfo(name.rstrip("/"))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if name.endswith("/"):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            try:
                with source.open("rb") as content:
                    facts = os.fstat(content.fileno())
                    info.size = facts.st_size
                    info.mode = 0o755 if facts.st_mode & stat.S_IXUSR else 0o644
                    tar.addfile(info, content)
            except OSError as exc:
                raise PackError(f"cannot read {name}: {exc.strerror or exc}") from None
            files += 1
    return files


def _too_big(plan: _Plan, max_bytes: int) -> str:
    total = sum(s for s, _ in plan.sizes)
    biggest = sorted(plan.sizes, key=lambda item: (-item[0], item[1]))[:BIGGEST_SHOWN]
    named = ", ".join(f"{name} ({size(s)})" for s, name in biggest)
    return (
        f"the project packs to more than {size(max_bytes)}, the most the server takes "
        f"({len(plan.sizes)} files, {size(total)} before compression); the biggest: {named}. "
        "Add what the job does not need to .gitignore"
    )
