"""The store of uploaded code, on the suite's real Redis, in a folder and in S3 (moto): each
archive kept once by its SHA-256, owned per account, bounded per account, dropped when unused
for its TTL (its archive when no account owns it any more), checked again when fetched back."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
import redis.asyncio as aioredis

from app.artifacts import ArtifactStore, LocalArtifacts, S3Artifacts
from app.code.store import AREA, BLOB, CodeStore, CorruptCodeError, OverAccountBoundError
from app.code.sweep import CodeSweep
from app.store.keys import CODE_USED
from tests.code.archives import project
from tests.s3_server import new_bucket

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.anyio
MOST = 1 << 20


@pytest.fixture(params=["local", "s3"])
def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "local":
        return LocalArtifacts(tmp_path / "artifacts").within(AREA)
    client: S3Client = request.getfixturevalue("s3_client")
    return S3Artifacts(new_bucket(client), "runs", client=client).within(AREA)


@pytest.fixture
async def store(blobs: ArtifactStore, redis_url: str) -> AsyncIterator[CodeStore]:
    client = aioredis.Redis.from_url(redis_url)
    yield CodeStore(blobs, client)
    await client.aclose()


def archive_of(tmp_path: Path, text: str) -> tuple[Path, str]:
    path = project(tmp_path / f"{text}.tar.gz", {"main.py": text.encode()})
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


async def test_an_archive_is_kept_once_and_owned_per_account(
    store: CodeStore, tmp_path: Path
) -> None:
    path, code_id = archive_of(tmp_path, "one")
    assert await store.add("alice", code_id, path, MOST) is True
    assert await store.add("alice", code_id, path, MOST) is False  # hers already
    assert await store.add("bob", code_id, path, MOST) is True
    assert store.blobs.names(code_id) == [BLOB]
    info = await store.info("alice", code_id)
    assert info is not None
    assert (info.code_id, info.bytes) == (code_id, path.stat().st_size)
    assert await store.info("carol", code_id) is None  # the same bytes, not hers
    assert await store.info("alice", "not-a-sha") is None
    fetched = tmp_path / "fetched.tar.gz"
    store.fetch(code_id, fetched)
    assert fetched.read_bytes() == path.read_bytes()


async def test_an_account_s_code_is_bounded(store: CodeStore, tmp_path: Path) -> None:
    first, first_id = archive_of(tmp_path, "first")
    second, second_id = archive_of(tmp_path, "second")
    most = first.stat().st_size + second.stat().st_size - 1
    await store.add("alice", first_id, first, most)
    with pytest.raises(OverAccountBoundError):
        await store.add("alice", second_id, second, most)
    assert await store.info("alice", second_id) is None
    assert store.blobs.names(second_id) == []
    await store.drop("alice", first_id)  # its room comes back
    await store.add("alice", second_id, second, most)


async def test_unused_code_expires_and_its_archive_with_its_last_owner(
    store: CodeStore, tmp_path: Path, r: redis.Redis
) -> None:
    path, code_id = archive_of(tmp_path, "old")
    await store.add("alice", code_id, path, MOST)
    await store.add("bob", code_id, path, MOST)
    sweep = CodeSweep(store.blobs, r)
    assert sweep.expire(ttl_s=60) == 0  # both just used it
    await store.redis.zadd(CODE_USED, {f"{code_id}:alice": 1.0})  # long ago
    assert sweep.expire(ttl_s=60) == 1
    assert await store.info("alice", code_id) is None
    assert store.blobs.names(code_id) == [BLOB]  # bob's still
    assert sweep.expire(ttl_s=60, now=10**12) == 1
    assert store.blobs.names(code_id) == []
    assert await store.add("alice", code_id, path, MOST) is True  # stored anew
    assert store.blobs.names(code_id) == [BLOB]


async def test_a_fetch_checks_the_archive_s_sha256(tmp_path: Path, redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    store = CodeStore(LocalArtifacts(tmp_path / "artifacts").within(AREA), client)
    path, code_id = archive_of(tmp_path, "kept")
    await store.add("alice", code_id, path, MOST)
    await client.aclose()
    (tmp_path / "artifacts" / AREA / code_id / BLOB).write_bytes(b"changed on the disk")
    target = tmp_path / "fetched.tar.gz"
    with pytest.raises(CorruptCodeError):
        store.fetch(code_id, target)
    assert not target.exists()
    with pytest.raises(FileNotFoundError):
        store.fetch("0" * 64, target)
