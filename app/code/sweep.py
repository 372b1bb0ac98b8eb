"""The sweep of uploaded code, run by the service's periodic sweep (Service.sweep_code, beside
the artifacts'): it drops each account's hold on code unused for CODE_TTL_S that no job still
needs, and an archive with its last owner (app/code/store.py).

A script job's submit records the job in its hold's jobs (CodeStore.claim) before the job is
written. The sweep reads those jobs' statuses and takes out the ended ones, and those whose
record is gone (expired, or a submit that never wrote it) once GRACE_S has passed since the
claim; a hold with any job left is kept, however old its last use. It blocks: the periodic sweep
runs on a Celery worker or the dev stack's timer thread, with the service's sync Redis client.
"""

from __future__ import annotations

import time
from typing import cast

import redis

from app.artifacts import ArtifactStore
from app.code.store import DROP, GONE_TTL_S, hold_keys
from app.models import Status
from app.store.keys import CODE_USED, code_gone_key, code_jobs_key, job_key

#: How long a claimed job whose record cannot be found still counts: a submit writes it just
#: after its claim, and a failed one (a refusal, a replayed Idempotency-Key) never does.
GRACE_S = 600.0
#: Holds read per step of the walk over CODE_USED.
PAGE = 200
ENDED = frozenset(status.value.encode() for status in Status if status.terminal)


class CodeSweep:
    """The sweep over one deployment's code: its archives (`blobs`) and Redis (sync)."""

    def __init__(self, blobs: ArtifactStore, client: redis.Redis) -> None:
        self.blobs = blobs
        self.redis = client
        self._drop = client.register_script(DROP)

    def expire(self, ttl_s: float, now: float | None = None) -> int:
        """Drop every hold unused for ttl_s (CODE_TTL_S) that no job needs; how many went.
        Every hold's ended jobs are taken out on the way, so that the jobs of code in constant
        use do not pile up."""
        now = time.time() if now is None else now
        cutoff = now - ttl_s
        dropped, cursor = 0, 0
        while True:
            cursor, found = self.redis.zscan(CODE_USED, cursor, count=PAGE)
            page = cast(list[tuple[bytes, float]], found)
            holds = [_hold(member) for member, _ in page]
            needed = self._prune(holds, now)
            for (code_id, user), (_, last_use), jobs in zip(holds, page, needed, strict=True):
                if last_use < cutoff and jobs == 0:
                    dropped += self.drop(user, code_id, cutoff)
            if cursor == 0:
                return dropped

    def _prune(self, holds: list[tuple[str, str]], now: float) -> list[int]:
        """Take the jobs that no longer need them out of these holds' jobs; how many each has
        left. Three round trips for the lot."""
        with self.redis.pipeline(transaction=False) as pipe:
            for code_id, user in holds:
                pipe.zrange(code_jobs_key(code_id, user), 0, -1, withscores=True)
            claims = cast(list[list[tuple[bytes, float]]], pipe.execute())
        with self.redis.pipeline(transaction=False) as pipe:
            for jobs in claims:
                for job_id, _ in jobs:
                    pipe.hget(job_key(job_id.decode()), "status")
            statuses = iter(cast(list[bytes | None], pipe.execute()))
        left: list[int] = []
        with self.redis.pipeline(transaction=False) as pipe:
            for (code_id, user), jobs in zip(holds, claims, strict=True):
                done = [job_id for job_id, at in jobs if _ended(next(statuses), at, now)]
                if done:
                    pipe.zrem(code_jobs_key(code_id, user), *done)
                left.append(len(jobs) - len(done))
            pipe.execute()
        return left

    def drop(self, user: str, code_id: str, older_than: float) -> bool:
        """Take the code from the account if unused since `older_than` and no job needs it
        (as CodeStore.drop does), removing its archive with its last owner; whether it went."""
        args: list[str | float] = [code_id, user, older_than, GONE_TTL_S]
        answer = int(self._drop(keys=hold_keys(user, code_id), args=args))
        if answer == 2:
            self.blobs.delete(code_id)
            self.redis.delete(code_gone_key(code_id))
        return answer > 0


def _ended(status: bytes | None, claimed_at: float, now: float) -> bool:
    """Whether a claimed job needs its code no more: it has ended, or its record is gone."""
    return status in ENDED or (status is None and claimed_at < now - GRACE_S)


def _hold(member: bytes) -> tuple[str, str]:
    """A member of CODE_USED: (code id, user)."""
    code_id, user = member.decode().split(":", 1)
    return code_id, user
