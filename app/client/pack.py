"""Packing a project folder for `fairgpu run`: a `.tar.gz` of what Git would keep, in the shape
the server's POST /code accepts (regular files and folders under relative names, nothing else),
written to a temporary file as it is read and never held in memory.

What is left out:
- what the folder's `.gitignore` files leave out, the nested ones too, by Git's rules (the last
  pattern that matches a path decides, a deeper file's after the outer ones'; a folder left out
  is not entered, so nothing under it comes back; tests/client/test_pack.py holds the result to
  `git ls-files` itself); every `.git` (a folder, or the file of a worktree or submodule).
  Only the `.gitignore` files inside the folder count: not `.git/info/exclude`, nor the user's
  global excludes.
- `.env` and `.env.*` files, named in the notes, unless `include_env` (then they are packed even
  where a `.gitignore` leaves them out, since that is where secrets files usually are).
- symbolic links, each named in the notes: the server takes regular files only, and following
  one could pack what lies outside the project or what a `.gitignore` keeps out.
- sockets, pipes and device files, named in the notes.

The archive is deterministic, so the same files give the same SHA-256 (the server stores code
by it): names sorted, times, owners and the gzip header fixed, modes 0644, or 0755 for a file
its owner may run and for folders. A project past the server's bounds is refused before anything
is sent: with more files and folders than `max_members` or more bytes of files than
`max_unpacked_bytes` before a byte is written, naming its fullest folders or biggest files; one
that packs to more than `max_bytes` as soon as the archive passes it, naming its biggest files."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import stat
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from pathspec import GitIgnoreSpec

from app.client.words import size

# The server's defaults (MAX_CODE_BYTES, MAX_CODE_UNPACKED_BYTES, MAX_CODE_MEMBERS): past them
# it would refuse the upload, so the client refuses first and says what to leave out.
MAX_PACK_BYTES = 100 << 20
MAX_UNPACKED_BYTES = 1 << 30
MAX_MEMBERS = 20_000
SHOWN = 5  # files, or folders, named when a project is too big


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

    def __init__(self, raw: IO[bytes], limit: int) -> None:
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
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES,
    max_members: int = MAX_MEMBERS,
    into: Path | None = None,
) -> Packed:
    """Pack the folder `root` into a temporary `.tar.gz` (in `into`, else the system's temporary
    folder). PackError when it is not a folder, a file cannot be read, or the archive would pass
    `max_bytes`; nothing is left behind then."""
    root = Path(root)
    if not root.is_dir():
        raise PackError(f"{root} is not a folder")
    plan = _Plan()
    _walk(root, "", _Rules(), plan, include_env)
    _check_bounds(plan, max_unpacked_bytes, max_members)
    if plan.ignored:
        paths = "1 path" if plan.ignored == 1 else f"{plan.ignored} paths"
        plan.notes.append(f"{paths} left out by .gitignore")
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
        raise PackError(_too_big(plan, f"packs to more than {size(max_bytes)}")) from None
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Packed(path, sink.digest.hexdigest(), sink.count, files, plan.notes)


@dataclass(frozen=True)
class _Rule:
    """One `.gitignore` pattern, relative to the project: whether it leaves out (or, `!`,
    keeps) what it matches, and pathspec's regular expression of it, made to match a whole path
    (a folder's with its trailing slash) rather than anything under a folder it names, which
    the walk has judged already; `inside` for `X/**`, which matches all that is in X and not X."""

    leaves_out: bool
    regex: re.Pattern[str]
    inside: bool

    def matches(self, name: str, is_dir: bool) -> bool:
        target = name + "/" if is_dir else name
        found = self.regex.search(target)
        if found is None:
            return False
        return not (self.inside and found.end() == len(target))


@dataclass(frozen=True)
class _Rules:
    """The `.gitignore` patterns in force in a folder, outermost file first, each rewritten to be
    relative to the project: the last one that matches a path decides, as in Git."""

    rules: tuple[_Rule, ...] = ()

    def ignores(self, name: str, is_dir: bool) -> bool:
        """Whether Git would leave out `name` (relative to the project), whose folders above
        have been judged already (a folder left out is never entered)."""
        for rule in reversed(self.rules):
            if rule.matches(name, is_dir):
                return rule.leaves_out
        return False


def _rule(line: str) -> _Rule | None:
    """A rewritten `.gitignore` line as a rule; None for one that matches nothing, or that is
    not a pattern at all (Git passes over those too)."""
    try:
        [pattern] = GitIgnoreSpec.from_lines([line]).patterns  # pathspec's own reading of it
    except ValueError:
        return None
    if pattern.include is None or pattern.regex is None:
        return None
    inside = line.rstrip(" ").endswith("/**")
    source = pattern.regex.pattern
    whole = pattern.regex if inside else re.compile(f"(?:{source})\\Z", pattern.regex.flags)
    return _Rule(pattern.include, whole, inside)


def _walk(folder: Path, prefix: str, rules: _Rules, plan: _Plan, env: bool) -> None:
    """Plan the folder `folder`, whose name in the archive is `prefix` ("" for the root, else
    ending in "/"), under the `.gitignore` rules of the folders above it."""
    rules = _with_rules(folder, prefix, rules)
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
                plan.notes.append(f"{name}: an env file, left out (--include-env sends it)")
        elif rules.ignores(name, is_dir):
            plan.ignored += 1
        elif is_dir:
            plan.entries.append((name + "/", Path(child.path)))
            _walk(Path(child.path), name + "/", rules, plan, env)
        elif child.is_file(follow_symlinks=False):
            plan.add_file(name, child)
        else:
            plan.notes.append(f"{name}: not a regular file (a socket, pipe or device), left out")


def _with_rules(folder: Path, prefix: str, rules: _Rules) -> _Rules:
    """The rules in force in `folder`: those above it, and its own `.gitignore`'s if it has one
    (a link named `.gitignore` is not read, as it is not packed)."""
    path = folder / ".gitignore"
    if not path.is_file() or path.is_symlink():
        return rules
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise PackError(f"cannot read {prefix}.gitignore: {exc.strerror}") from None
    rerooted = (_rerooted(line, prefix) for line in text.splitlines())
    own = (_rule(line) for line in rerooted if line is not None)
    return _Rules((*rules.rules, *(rule for rule in own if rule is not None)))


def _rerooted(line: str, prefix: str) -> str | None:
    """A `.gitignore` line of the folder `prefix`, relative to the project instead; None for a
    blank line or a comment. By Git's rule a pattern with a slash before its end is anchored to
    its file's folder, and one without matches at any depth below it."""
    if not line.strip() or line.startswith("#"):
        return None
    if not prefix:
        return line
    negated = line.startswith("!")
    body = line[1:] if negated else line
    anchored = "/" in body.rstrip(" ").rstrip("/")
    base = "".join(f"\\{c}" if c in "\\*?[" else c for c in prefix)  # the folder's name, literally
    rooted = base + body.removeprefix("/") if anchored else f"{base}**/{body}"
    return f"!{rooted}" if negated else rooted


def _is_env(name: str) -> bool:
    return name == ".env" or name.startswith(".env.")


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


def _check_bounds(plan: _Plan, max_unpacked_bytes: int, max_members: int) -> None:
    """Refuse, before anything is written, a project past the server's bounds on its files."""
    if len(plan.entries) > max_members:
        per_top = Counter(name.split("/", 1)[0] for name, _ in plan.entries)
        fullest = sorted(per_top.items(), key=lambda item: (-item[1], item[0]))[:SHOWN]
        named = ", ".join(f"{name} ({count:,})" for name, count in fullest)
        raise PackError(
            f"the project has {len(plan.entries):,} files and folders, more than the "
            f"{max_members:,} the server takes; the fullest: {named}. "
            "Add what the job does not need to .gitignore"
        )
    if sum(s for s, _ in plan.sizes) > max_unpacked_bytes:
        raise PackError(_too_big(plan, f"holds more than {size(max_unpacked_bytes)} of files"))


def _too_big(plan: _Plan, what: str) -> str:
    total = sum(s for s, _ in plan.sizes)
    biggest = sorted(plan.sizes, key=lambda item: (-item[0], item[1]))[:SHOWN]
    named = ", ".join(f"{name} ({size(s)})" for s, name in biggest)
    return (
        f"the project {what}, the most the server takes "
        f"({len(plan.sizes)} files, {size(total)} before compression); the biggest: {named}. "
        "Add what the job does not need to .gitignore"
    )
