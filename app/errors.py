"""The service's exceptions, and the one place where its Lua error replies become them.

    FairGPUError
     ├── IdempotencyMismatchError    submit.lua's IDEMPOTENCY_MISMATCH: an Idempotency-Key used
     │                               again with another request (the API's 422)
     ├── RateLimitedError            a submit over its key's rate (app/store/submit.py; 429)
     └── OverBudgetError             a submit its account's monthly budget cannot cover
                                     (app/store/submit.py; 402)

The worker's own (app/worker/calls.py, gpu.py) stop a worker rather than answer a request:

    ChildStartError                  the job child cannot load the job types
     └── DeviceBrokenError           a fresh child's device check failed: the card is unusable
    DeviceError                      CUDA_VISIBLE_DEVICES names more than one device, or none
                                     that torch can use

The fair queue's own errors (DuplicateTaskError, QueueFullError, ...) are in app/vtrr/errors.py;
a submit's hooks run in the queue's enqueue, so a job id that exists already is its
DuplicateTaskError.
Redis itself fails in two ways, told apart by `transient()`:

    transient    redis-py's ConnectionError and TimeoutError, and the replies LOADING, BUSY,
                 MASTERDOWN, NOREPLICAS, READONLY, TRYAGAIN, CLUSTERDOWN: Redis is away, starting,
                 failing over or busy; the API answers 503 with Retry-After, workers wait it out.
    not          any other ResponseError (a bug in a script, a wrong type): the API answers 500
                 and logs it; retrying would fail the same way.
"""

from __future__ import annotations

from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

#: Error replies that say Redis cannot serve now but will: each is the reply's first word.
TRANSIENT_REPLIES = frozenset(
    {"LOADING", "BUSY", "MASTERDOWN", "NOREPLICAS", "READONLY", "TRYAGAIN", "CLUSTERDOWN"}
)
#: What redis-py raises while Redis cannot be reached at all.
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)
#: The classes redis-py gives some of TRANSIENT_REPLIES, whose text then lacks the code.
_TRANSIENT_CLASSES = (
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    ReadOnlyError,
    TryAgainError,
)


class FairGPUError(Exception):
    """Base of the service's own errors."""


class IdempotencyMismatchError(FairGPUError):
    """An Idempotency-Key was used again with a different request; nothing was written."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"this Idempotency-Key was first used for job {job_id!r}")
        self.job_id = job_id


def from_reply(exc: ResponseError) -> Exception:
    """The exception a store script's or hook's error reply stands for (the reply itself if
    not ours)."""
    code, _, detail = str(exc).partition(" ")
    if code == "IDEMPOTENCY_MISMATCH":
        return IdempotencyMismatchError(detail)
    return exc


def transient(exc: BaseException) -> bool:
    """Whether Redis failed in a way that a retry in a few seconds may get past."""
    if isinstance(exc, UNREACHABLE):
        return True
    if isinstance(exc, ResponseError):
        # redis-py strips the code of the replies it has a class for (READONLY, LOADING, ...).
        code = str(exc).split(" ", 1)[0]
        return code in TRANSIENT_REPLIES or isinstance(exc, _TRANSIENT_CLASSES)
    return False
