"""Where uploaded code is kept: each archive once, by its SHA-256, in the artifacts' store
(ARTIFACTS_DIR/code/<sha256>/code.tar.gz, or code/ under ARTIFACTS_URL's prefix), and which
accounts own it, in Redis. An account sees only the code it uploaded itself: the same bytes
uploaded by another are, to it, an unknown id.

    fairgpu:code:<user>           hash    <sha256> -> "<bytes> <uploaded_at>", and `_total`:
                                          the bytes of all of them (MAX_CODE_BYTES_PER_ACCOUNT)
    fairgpu:code-owners:<sha256>  set     the accounts that own it; none left: it is removed
    fairgpu:code-used             zset    "<sha256>:<user>" by its last use (an upload counts);
                                          expire() removes those unused for CODE_TTL_S
    fairgpu:code-gone:<sha256>    string  set while its archive is being removed: an upload of
                                          the same bytes waits until it is gone, then stores it anew

The archive's SHA-256 is checked again whenever it is fetched back (fetch). The blob store
blocks: its calls go to a thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from redis.asyncio import Redis

from app.artifacts import ArtifactStore, open_artifacts
from app.connections import async_client
from app.settings import Settings

#: Where, under the artifacts' folder or prefix, code is kept (no job id: no sweep of theirs
#: reaches it).
AREA = "code"
BLOB = "code.tar.gz"
TOTAL = "_total"
USED = "fairgpu:code-used"
#: How long an archive being removed holds off an upload of the same bytes, at most.
GONE_TTL_S = 300
GONE_POLL_S = 0.05
CHUNK_BYTES = 1 << 20
CODE_ID = re.compile(r"[0-9a-f]{64}")


def code_key(user: str) -> str:
    return f"fairgpu:code:{user}"


def owners_key(code_id: str) -> str:
    return f"fairgpu:code-owners:{code_id}"


def gone_key(code_id: str) -> str:
    return f"fairgpu:code-gone:{code_id}"


# KEYS: the account's hash, the owners, USED, the gone mark. ARGV: id, user, bytes, now, most.
# 1: newly the account's; 0: it had it already (its use renewed); -1: being removed, wait;
# -2: over the account's bound.
_REGISTER = """
if redis.call('EXISTS', KEYS[4]) == 1 then return -1 end
local used = ARGV[1] .. ':' .. ARGV[2]
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[3], ARGV[4], used)
  return 0
end
local total = tonumber(redis.call('HGET', KEYS[1], '_total') or '0')
if total + tonumber(ARGV[3]) > tonumber(ARGV[5]) then return -2 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. ' ' .. ARGV[4])
redis.call('HINCRBY', KEYS[1], '_total', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[4], used)
return 1
"""

# KEYS: as _REGISTER's. ARGV: id, user, cutoff (only a use before it is dropped; none: any),
# the gone mark's TTL. 0: kept; 1: dropped, others own it; 2: dropped, its archive to remove.
_DROP = """
local used = ARGV[1] .. ':' .. ARGV[2]
local at = redis.call('ZSCORE', KEYS[3], used)
if ARGV[3] ~= '' and at and tonumber(at) >= tonumber(ARGV[3]) then return 0 end
local record = redis.call('HGET', KEYS[1], ARGV[1])
if record then
  redis.call('HDEL', KEYS[1], ARGV[1])
  local left = redis.call('HINCRBY', KEYS[1], '_total', -tonumber(string.match(record, '^%d+')))
  if left <= 0 then redis.call('HDEL', KEYS[1], '_total') end
end
redis.call('ZREM', KEYS[3], used)
redis.call('SREM', KEYS[2], ARGV[2])
if redis.call('SCARD', KEYS[2]) > 0 then return 1 end
redis.call('SET', KEYS[4], '1', 'EX', ARGV[4])
return 2
"""


class OverAccountBoundError(Exception):
    """The account's stored code would pass MAX_CODE_BYTES_PER_ACCOUNT."""


class CorruptCodeError(Exception):
    """An archive fetched back whose bytes no longer have its SHA-256."""


@dataclass(frozen=True)
class CodeInfo:
    """What its owner is told of its code."""

    code_id: str
    bytes: int
    uploaded_at: float


def is_code_id(text: str) -> bool:
    """Whether the text could name code at all: a SHA-256 in lower-case hex."""
    return CODE_ID.fullmatch(text) is not None


def sha256_of(path: Path) -> str:
    """The file's SHA-256, hex."""
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


class CodeStore:
    """The archives (in `blobs`, the artifacts' store within AREA) and their owners (Redis)."""

    def __init__(self, blobs: ArtifactStore, redis: Redis) -> None:
        self.blobs = blobs
        self.redis = redis
        self._register = redis.register_script(_REGISTER)
        self._drop = redis.register_script(_DROP)

    def _keys(self, user: str, code_id: str) -> list[str]:
        return [code_key(user), owners_key(code_id), USED, gone_key(code_id)]

    async def add(self, user: str, code_id: str, archive: Path, most_per_account: int) -> bool:
        """Make the archive (whose SHA-256 is code_id) the account's, storing it unless stored
        already; whether it is new to the account. OverAccountBoundError past its bound."""
        size = archive.stat().st_size
        keys = self._keys(user, code_id)
        while True:  # the gone mark lasts GONE_TTL_S at most
            args: list[str | float] = [code_id, user, size, time.time(), most_per_account]
            answer = int(await self._register(keys=keys, args=args))
            if answer != -1:
                break
            await asyncio.sleep(GONE_POLL_S)  # the same bytes are being removed: then anew
        if answer == -2:
            raise OverAccountBoundError(code_id)
        try:
            if await asyncio.to_thread(self.blobs.names, code_id) != [BLOB]:
                await asyncio.to_thread(self._put, code_id, archive)
        except BaseException:
            if answer == 1:  # an account left owning code that is not there would 404 on fetch
                await self.drop(user, code_id)
            raise
        return answer == 1

    def _put(self, code_id: str, archive: Path) -> None:
        with archive.open("rb") as source:
            self.blobs.put(code_id, BLOB, source)

    async def info(self, user: str, code_id: str) -> CodeInfo | None:
        """The account's own code of that id; None when it has none (whoever else may)."""
        if not is_code_id(code_id):
            return None
        record = cast(bytes | None, await self.redis.hget(code_key(user), code_id))
        if record is None:
            return None
        size, uploaded_at = record.split()
        return CodeInfo(code_id, int(size), float(uploaded_at))

    async def drop(self, user: str, code_id: str, older_than: float | None = None) -> bool:
        """Take the code from the account (only if unused since `older_than`, when given),
        removing its archive when no account owns it any more; whether it was taken."""
        cutoff: str | float = "" if older_than is None else older_than
        args: list[str | float] = [code_id, user, cutoff, GONE_TTL_S]
        answer = int(await self._drop(keys=self._keys(user, code_id), args=args))
        if answer == 2:
            await asyncio.to_thread(self.blobs.delete, code_id)
            await self.redis.delete(gone_key(code_id))
        return answer > 0

    async def expire(self, ttl_s: float, now: float | None = None) -> int:
        """Drop every account's code unused for ttl_s (CODE_TTL_S); how many were dropped.
        (Script jobs will keep theirs: see docs/scripts.md, "Retention".)"""
        cutoff = (time.time() if now is None else now) - ttl_s
        stale = cast(list[bytes], await self.redis.zrangebyscore(USED, "-inf", f"({cutoff}"))
        dropped = 0
        for member in stale:
            code_id, user = member.decode().split(":", 1)
            dropped += await self.drop(user, code_id, older_than=cutoff)
        return dropped

    def fetch(self, code_id: str, target: Path) -> None:
        """Copy the archive to `target`, checking its SHA-256 on the way (blocks):
        FileNotFoundError when it is not stored, CorruptCodeError (and no target) when its
        bytes are not those it was stored as."""
        digest = hashlib.sha256()
        source = self.blobs.open(code_id, BLOB)
        try:
            with target.open("wb") as copy:
                while chunk := source.read(CHUNK_BYTES):
                    digest.update(chunk)
                    copy.write(chunk)
        finally:
            source.close()
        if digest.hexdigest() != code_id:
            target.unlink(missing_ok=True)
            raise CorruptCodeError(f"{code_id}: the stored archive's bytes have changed")


def expire_code(settings: Settings) -> int:
    """Drop the code unused for CODE_TTL_S, for the service's periodic sweep (blocks: it runs
    where no event loop does); how many accounts' holds went."""

    async def expire() -> int:
        client = async_client(settings)
        try:
            store = CodeStore(open_artifacts(settings).within(AREA), client)
            return await store.expire(settings.code_ttl_s)
        finally:
            await client.aclose()

    return asyncio.run(expire())
