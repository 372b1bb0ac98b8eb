"""The per-host cache of built environments: one build per key, LRU out, never one in use.

Layout under the cache's root::

    envs/<key>/        a finished environment (renamed into place whole, never half built)
    keys/<key>.build   held exclusively while <key> is built: one build at a time per key
    keys/<key>.use     held shared by each user of <key>; its mtime is <key>'s last use
    keys/<key>.bytes   the environment's size, measured once after its build
    tmp/               builds in progress (each with its own download cache, removed after),
                       and environments being removed

Eviction takes `.use` exclusively without waiting: an environment someone holds is skipped.
All locks are `fcntl` locks on files, so they hold across the worker's processes and end with
the process that held them.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: Where in its workspace a build leaves the environment.
BUILT = "env"


@dataclass(frozen=True)
class CacheEntry:
    """An environment ready for use: where it is, and whether this use built it."""

    path: Path
    cached: bool
    seconds: float
    output: str  # the build's output; "" for a hit


class EnvCache:
    """Built environments under `root`, at most `budget_bytes` of them (one may exceed it)."""

    def __init__(self, root: Path, budget_bytes: int) -> None:
        self.root = root
        self.budget_bytes = budget_bytes
        for folder in ("envs", "keys", "tmp"):
            (root / folder).mkdir(parents=True, exist_ok=True)

    @contextmanager
    def use(self, key: str, build: Callable[[Path], str]) -> Iterator[CacheEntry]:
        """The environment of `key`, built by `build(workspace)` (its output) if not there yet.

        A build leaves the environment in `workspace / BUILT`; anything else it leaves in its
        workspace goes with it. The environment stays in the cache while the block runs; a
        failed build leaves nothing behind.
        """
        started = time.monotonic()
        with _locked(self._key_file(key, "use"), fcntl.LOCK_SH) as use_file:
            os.utime(use_file.fileno())
            path, output, built = self.root / "envs" / key, "", False
            if not path.is_dir():
                output, built = self._build_once(key, path, build)
                self.evict(keep=key)
            yield CacheEntry(path, not built, time.monotonic() - started, output)

    def _build_once(self, key: str, path: Path, build: Callable[[Path], str]) -> tuple[str, bool]:
        """Build in a temporary workspace and rename it into place, unless another did first."""
        with _locked(self._key_file(key, "build"), fcntl.LOCK_EX):
            if path.is_dir():
                return "", False  # built by another while this one waited: a hit after all
            workspace = Path(tempfile.mkdtemp(prefix=f"{key[:16]}-", dir=self.root / "tmp"))
            try:
                output = build(workspace)
                size = tree_bytes(workspace / BUILT)
                (workspace / BUILT).rename(path)
            finally:
                shutil.rmtree(workspace, ignore_errors=True)
            self._key_file(key, "bytes").write_text(str(size))
            return output, True

    def evict(self, keep: str = "") -> list[str]:
        """Remove least recently used environments not in use until the cache fits its budget."""
        entries = self.entries()
        total = sum(size for _, _, size in entries)
        removed = []
        for key, _, size in sorted(entries, key=lambda entry: entry[1]):
            if total <= self.budget_bytes:
                break
            if key != keep and self._remove_unused(key):
                total -= size
                removed.append(key)
        return removed

    def entries(self) -> list[tuple[str, float, int]]:
        """Each environment's key, last use (mtime) and size in bytes."""
        found = []
        for path in (self.root / "envs").iterdir():
            use, size = self._key_file(path.name, "use"), self._key_file(path.name, "bytes")
            try:
                found.append((path.name, use.stat().st_mtime, int(size.read_text())))
            except FileNotFoundError:
                continue  # being removed by another's eviction, or not measured yet
        return found

    def _remove_unused(self, key: str) -> bool:
        """Remove `key`'s environment unless someone holds it; whether it went."""
        with open(self._key_file(key, "use"), "a") as use_file:
            try:
                fcntl.flock(use_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            path = self.root / "envs" / key
            if not path.is_dir():
                return False
            # Renamed out first: a reader never sees a half-removed environment.
            doomed = Path(tempfile.mkdtemp(prefix="evicted-", dir=self.root / "tmp"))
            path.rename(doomed / key)
            self._key_file(key, "bytes").unlink(missing_ok=True)
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def _key_file(self, key: str, suffix: str) -> Path:
        return self.root / "keys" / f"{key}.{suffix}"


@contextmanager
def _locked(path: Path, operation: int) -> Iterator[IO[str]]:
    """`path` opened (created if missing) and flock'ed for the block."""
    with open(path, "a") as file:
        fcntl.flock(file, operation)
        try:
            yield file
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def tree_bytes(folder: Path) -> int:
    """The bytes of a folder's files, links not followed."""
    total = 0
    for directory, _, files in os.walk(folder):
        total += sum(os.lstat(os.path.join(directory, name)).st_size for name in files)
    return total
