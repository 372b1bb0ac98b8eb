"""Where uploaded code is kept: each archive once, by its SHA-256, in the artifacts' store
(ARTIFACTS_DIR/code/<sha256>/code.tar.gz, or code/ under ARTIFACTS_URL's prefix), and which
accounts own it, in Redis (the keys: app/store/keys.py, "Uploaded code"). An account sees only
the code it uploaded itself: the same bytes uploaded by another are, to it, an unknown id.

An account's hold on its code has a last use (an upload, a script job's submit, which also
records the job: claim). The service's sweep (app/code/sweep.py) drops a hold unused for
CODE_TTL_S unless a job that named it has not ended, and an archive with its last owner.

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

from app.artifacts import ArtifactStore
from app.store.keys import CODE_USED, code_gone_key, code_jobs_key, code_key, code_owners_key

#: Where, under the artifacts' folder or prefix, code is kept (no job id: no sweep of theirs
#: reaches it).
AREA = "code"
BLOB = "code.tar.gz"
TOTAL = "_total"
#: How long an archive being removed holds off an upload of the same bytes, at most.
GONE_TTL_S = 300
GONE_POLL_S = 0.05
CHUNK_BYTES = 1 << 20
CODE_ID = re.compile(r"[0-9a-f]{64}")


def hold_keys(user: str, code_id: str) -> list[str]:
    """The keys of an account's hold on code, as _REGISTER and DROP take them."""
    return [
        code_key(user),
        code_owners_key(code_id),
        CODE_USED,
        code_gone_key(code_id),
        code_jobs_key(code_id, user),
    ]


# KEYS: the account's hash, the owners, CODE_USED, the gone mark (hold_keys' first four).
# ARGV: id, user, bytes, now, most.
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

# KEYS: hold_keys. ARGV: id, user, cutoff (only a use before it is dropped; none: any), the
# gone mark's TTL. 0: kept (used since, or a job that named it is not known to have ended);
# 1: dropped, others own it; 2: dropped, its archive to remove.
DROP = """
if redis.call('ZCARD', KEYS[5]) > 0 then return 0 end
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

# KEYS: the account's hash, CODE_USED, the hold's jobs. ARGV: id, user, job id, now. 1: the
# account owns it, and the job is recorded and its use renewed; 0: it does not (nothing written).
_CLAIM = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1] .. ':' .. ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3])
return 1
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
        self._drop = redis.register_script(DROP)
        self._claim = redis.register_script(_CLAIM)

    async def add(self, user: str, code_id: str, archive: Path, most_per_account: int) -> bool:
        """Make the archive (whose SHA-256 is code_id) the account's, storing it unless stored
        already; whether it is new to the account. OverAccountBoundError past its bound."""
        size = archive.stat().st_size
        keys = hold_keys(user, code_id)[:4]
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
        """Take the code from the account (only if unused since `older_than`, when given, and
        never while a job that named it may not have ended), removing its archive when no
        account owns it any more; whether it was taken."""
        cutoff: str | float = "" if older_than is None else older_than
        args: list[str | float] = [code_id, user, cutoff, GONE_TTL_S]
        answer = int(await self._drop(keys=hold_keys(user, code_id), args=args))
        if answer == 2:
            await asyncio.to_thread(self.blobs.delete, code_id)
            await self.redis.delete(code_gone_key(code_id))
        return answer > 0

    async def claim(self, user: str, code_id: str, job_id: str) -> bool:
        """A script job of the account's names this code: whether the account owns it; if it
        does, the job is recorded as needing it (before the job is written, so that no sweep
        finds it unneeded meanwhile) and its use renewed. One atomic call."""
        if not is_code_id(code_id):
            return False
        keys = [code_key(user), CODE_USED, code_jobs_key(code_id, user)]
        args: list[str | float] = [code_id, user, job_id, time.time()]
        return int(await self._claim(keys=keys, args=args)) == 1

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
