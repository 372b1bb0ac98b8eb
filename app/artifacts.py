"""Artifacts: the files a job leaves, kept in a local folder or in S3-compatible storage.

Workers put them (app/worker), the API serves them (GET /tasks/{id}/artifacts/{name}) and the
service's periodic sweep removes them once their job's record has expired (JOB_TTL_S).

    local   ARTIFACTS_DIR (default ./artifacts)/<job id>/<name>
    S3      ARTIFACTS_URL=s3://bucket/prefix -> object prefix/<job id>/<name>;
            ARTIFACTS_ENDPOINT_URL for a server that is not AWS; credentials from the usual AWS
            environment variables

A name may have folders ("plots/loss.png"); check_name refuses one that could leave the job's
folder or its prefix. Both stores block: call them from a thread in async code.

A store's `within(CHECKPOINTS)` is a store of the same kind one level down, where the jobs'
checkpoints are kept (app/worker/checkpoints.py): ARTIFACTS_DIR/checkpoints/<job id>/, or
prefix/checkpoints/<job id>/. That name is no job id, so neither the API nor an artifact sweep
ever reaches them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol
from urllib.parse import urlsplit

from app.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef, PaginatorConfigTypeDef

DEFAULT_DIR = Path("artifacts")
MAX_NAME = 1024  # S3's longest key; the prefix and job id come on top, so this is generous
MAX_PART = 255  # the longest file name most file systems take
#: S3 takes at most this many keys per DeleteObjects call (and lists as many per page).
PAGE = 1000
#: Where, under the artifacts' folder or prefix, the jobs' checkpoints are kept.
CHECKPOINTS = "checkpoints"


class BadNameError(ValueError):
    """A name that does not stay inside a job's folder (or a malformed job id)."""


class ArtifactFile(Protocol):
    """An artifact opened for reading: read(n) returns b"" at the end; close() when done."""

    def read(self, size: int, /) -> bytes:
        """Up to `size` bytes; b"" at the end."""
        ...

    def close(self) -> None:
        """Release the file or connection."""
        ...


class ArtifactStore(Protocol):
    """Where artifacts are kept. Every method blocks."""

    def put(self, job_id: str, name: str, source: BinaryIO) -> None:
        """Store what `source` reads, to its end, as the job's artifact `name`, replacing one
        so named. It is read once, from start to end (it need not seek)."""
        ...

    def open(self, job_id: str, name: str) -> ArtifactFile:
        """The job's artifact, to read; FileNotFoundError when there is none so named."""
        ...

    def delete(self, job_id: str) -> None:
        """Remove all of the job's artifacts (none: nothing happens)."""
        ...

    def names(self, job_id: str) -> list[str]:
        """The names of the job's artifacts, sorted ([] when it has none)."""
        ...

    def remove(self, job_id: str, names: Iterable[str]) -> None:
        """Remove those of the job's artifacts (a name it has not: nothing happens)."""
        ...

    def sweep(self, older_than_s: float, alive: Callable[[str], bool] | None = None) -> int:
        """Remove the artifacts of every job whose newest one is older than this, unless
        alive(job id) says to keep them; how many jobs' artifacts were removed."""
        ...

    def within(self, area: str) -> ArtifactStore:
        """A store of the same kind whose jobs' files lie under `area` (a plain name) of this
        one's folder or prefix."""
        ...


def check_name(name: str) -> str:
    """The name, if it names a file inside a job's folder; BadNameError otherwise (absolute,
    `..`, a backslash, NUL or another control character, empty parts, too long)."""
    if not name or len(name) > MAX_NAME:
        raise BadNameError(f"an artifact's name has 1 to {MAX_NAME} characters")
    if name.startswith("/") or ".." in name or "\\" in name:
        raise BadNameError(f"{name!r}: not a relative name inside the job's folder")
    # Control characters (NUL above all) would break file systems and Content-Disposition.
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in name):
        raise BadNameError(f"{name!r}: control characters are not allowed")
    parts = name.split("/")
    if any(part in ("", ".") or len(part) > MAX_PART for part in parts):
        raise BadNameError(f"{name!r}: empty, '.' or over-long parts are not allowed")
    return name


def _check_job(job_id: str) -> str:
    """A job id is one plain folder name (they are UUIDs)."""
    if "/" in check_name(job_id):
        raise BadNameError(f"{job_id!r}: not a job id")
    return job_id


def _is_job_id(name: str) -> bool:
    """Whether a folder's name is a job id (a UUID): a sweep removes nothing else, should the
    folder or prefix hold more than artifacts."""
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def open_artifacts(settings: Settings) -> ArtifactStore:
    """The store the settings name: S3 with ARTIFACTS_URL, else the local folder."""
    if settings.artifacts_url:
        bucket, prefix = parse_s3_url(settings.artifacts_url)
        return S3Artifacts(bucket, prefix, endpoint_url=settings.artifacts_endpoint_url)
    return LocalArtifacts(settings.artifacts_dir or DEFAULT_DIR)


def parse_s3_url(url: str) -> tuple[str, str]:
    """(bucket, prefix without slashes at its ends) of s3://bucket/prefix; ValueError else."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"{url!r}: ARTIFACTS_URL must be s3://bucket or s3://bucket/prefix")
    return parts.netloc, parts.path.strip("/")


class LocalArtifacts:
    """Artifacts in a folder: one sub-folder per job."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, job_id: str, name: str) -> Path:
        return self.folder(job_id) / check_name(name)

    def folder(self, job_id: str) -> Path:
        """The job's folder (it may not exist)."""
        return self.root / _check_job(job_id)

    def put(self, job_id: str, name: str, source: BinaryIO) -> None:
        """Copy the file in whole, then rename: a reader never sees half of it."""
        target = self._path(job_id, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".put-")
        try:
            with open(handle, "wb", closefd=True) as copy:
                shutil.copyfileobj(source, copy)
            os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide it from an API of another user
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        os.utime(self.root / job_id)  # a nested name's folder alone would not change it

    def open(self, job_id: str, name: str) -> ArtifactFile:
        """The file, only if it lies within the job's folder (a link could point elsewhere)."""
        path = self._path(job_id, name)
        folder = (self.root / job_id).resolve()
        if not path.resolve().is_relative_to(folder) or not path.is_file():
            raise FileNotFoundError(name)
        return path.open("rb")

    def delete(self, job_id: str) -> None:
        """Remove the job's folder."""
        shutil.rmtree(self.root / _check_job(job_id), ignore_errors=True)

    def names(self, job_id: str) -> list[str]:
        """The regular files under the job's folder; a link is no artifact of its."""
        folder = self.folder(job_id)
        found = []
        for parent, _, files in os.walk(folder):  # it does not follow a link to a folder
            for file in files:
                path = Path(parent, file)
                if not path.is_symlink() and path.is_file():
                    found.append(path.relative_to(folder).as_posix())
        return sorted(found)

    def remove(self, job_id: str, names: Iterable[str]) -> None:
        """Unlink each file."""
        for name in names:
            self._path(job_id, name).unlink(missing_ok=True)

    def sweep(self, older_than_s: float, alive: Callable[[str], bool] | None = None) -> int:
        """A job folder's time is that of its last put (put touches it)."""
        if not self.root.is_dir():
            return 0
        cutoff = time.time() - older_than_s
        old = [folder for folder in self.root.iterdir() if _expired(folder, cutoff)]
        if alive is not None:  # asked only of the old: it may cost a round trip each
            old = [folder for folder in old if not alive(folder.name)]
        for folder in old:
            shutil.rmtree(folder, ignore_errors=True)
        return len(old)

    def within(self, area: str) -> LocalArtifacts:
        """The sub-folder `area`."""
        return LocalArtifacts(self.root / _check_job(area))


def _expired(folder: Path, cutoff: float) -> bool:
    """Whether a folder is a job's whose last put was before the cutoff."""
    if not _is_job_id(folder.name) or folder.is_symlink() or not folder.is_dir():
        return False
    return folder.stat().st_mtime < cutoff


class S3Artifacts:
    """Artifacts as objects prefix/<job id>/<name> in one bucket."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        client: S3Client | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.client = client or _client(endpoint_url)
        self.page = PAGE  # keys listed, and deleted, per call

    def _key(self, job_id: str, name: str) -> str:
        return f"{self._folder(job_id)}{check_name(name)}"

    def _folder(self, job_id: str) -> str:
        return f"{self.prefix}{_check_job(job_id)}/"

    def put(self, job_id: str, name: str, source: BinaryIO) -> None:
        """Upload the file (in parts when large; S3 shows an object only once it is whole)."""
        self.client.upload_fileobj(source, self.bucket, self._key(job_id, name))

    def open(self, job_id: str, name: str) -> ArtifactFile:
        """The object's body, streamed."""
        key = self._key(job_id, name)
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
        except self.client.exceptions.NoSuchKey:
            raise FileNotFoundError(name) from None
        return answer["Body"]

    def delete(self, job_id: str) -> None:
        """Remove every object under the job's folder."""
        self._remove([key for key, _ in self._objects(self._folder(job_id))])

    def names(self, job_id: str) -> list[str]:
        """The objects under the job's folder, less the folder (S3 lists keys in order)."""
        folder = self._folder(job_id)
        return [key[len(folder) :] for key, _ in self._objects(folder)]

    def remove(self, job_id: str, names: Iterable[str]) -> None:
        """Delete those objects, a page of keys a call."""
        self._remove([self._key(job_id, name) for name in names])

    def within(self, area: str) -> S3Artifacts:
        """The prefix prefix/area/, on the same client."""
        inner = S3Artifacts(self.bucket, f"{self.prefix}{_check_job(area)}", client=self.client)
        inner.page = self.page
        return inner

    def sweep(self, older_than_s: float, alive: Callable[[str], bool] | None = None) -> int:
        """A job's time is that of its newest object."""
        cutoff = time.time() - older_than_s
        newest: dict[str, float] = {}
        keys: dict[str, list[str]] = {}
        for key, modified in self._objects(self.prefix):
            job_id = key[len(self.prefix) :].split("/", 1)[0]
            newest[job_id] = max(newest.get(job_id, 0.0), modified)
            keys.setdefault(job_id, []).append(key)
        old = [job_id for job_id, at in newest.items() if at < cutoff and _is_job_id(job_id)]
        if alive is not None:  # asked only of the old: it may cost a round trip each
            old = [job_id for job_id in old if not alive(job_id)]
        self._remove([key for job_id in old for key in keys[job_id]])
        return len(old)

    def _objects(self, prefix: str) -> Iterator[tuple[str, float]]:
        """(key, time of last change) of every object under the prefix."""
        pages = self.client.get_paginator("list_objects_v2")
        config: PaginatorConfigTypeDef = {"PageSize": self.page}
        for page in pages.paginate(Bucket=self.bucket, Prefix=prefix, PaginationConfig=config):
            for entry in page.get("Contents", []):
                yield entry["Key"], entry["LastModified"].timestamp()

    def _remove(self, keys: list[str]) -> None:
        for start in range(0, len(keys), self.page):
            batch: list[ObjectIdentifierTypeDef] = [
                {"Key": key} for key in keys[start : start + self.page]
            ]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})


def _client(endpoint_url: str | None) -> S3Client:
    """A client of its own session (boto3's default session is not thread-safe to build on)."""
    import boto3  # imported here: only an S3 store needs it, and it takes a while to load

    session = boto3.session.Session()
    return session.client("s3", endpoint_url=endpoint_url)
