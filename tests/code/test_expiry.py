"""The service's code sweep drops code unused for CODE_TTL_S, and its archive with its last
owner; code used since stays (what a job's use adds: test_code_in_use.py)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import redis
import redis.asyncio as aioredis

from app.artifacts import LocalArtifacts
from app.auth import Accounts
from app.code.store import AREA, BLOB, CodeStore
from app.settings import Settings
from app.store.keys import CODE_USED, code_key
from app.wiring.service import build
from tests.api.helpers import USERS_FILE
from tests.code.archives import project


def test_the_sweep_drops_code_unused_for_its_ttl(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    settings = Settings(
        users_file=USERS_FILE, redis_url=redis_url, artifacts_dir=tmp_path, code_ttl_s=60
    )
    old = project(tmp_path / "old.tar.gz", {"a.py": b"old"})
    new = project(tmp_path / "new.tar.gz", {"a.py": b"new"})
    old_id, new_id = (hashlib.sha256(p.read_bytes()).hexdigest() for p in (old, new))

    async def upload() -> None:
        client = aioredis.Redis.from_url(redis_url)
        store = CodeStore(LocalArtifacts(tmp_path).within(AREA), client)
        await store.add("alice", old_id, old, 1 << 20)
        await store.add("alice", new_id, new, 1 << 20)
        await client.aclose()

    asyncio.run(upload())
    r.zadd(CODE_USED, {f"{old_id}:alice": 1.0})  # its last use, long ago
    service = build(settings, Accounts.load(settings.users_file))
    try:
        assert service.sweep_code() == 1
    finally:
        service.close()
    assert not (tmp_path / AREA / old_id).exists()
    assert (tmp_path / AREA / new_id / BLOB).is_file()
    assert r.hexists(code_key("alice"), new_id)
    assert not r.hexists(code_key("alice"), old_id)
