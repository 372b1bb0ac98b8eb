"""The fair queue's exceptions, and the one place where Lua error replies become them.

    VTRRError
     ├── DuplicateTaskError   an id that is already queued or in flight (also a ValueError)
     ├── QueueFullError       a partition would go past its limit of queued items
     ├── OverLimitError       an item weighs more than its partition's items in flight may hold
     ├── NotReplicatedError   a write that fewer replicas than asked acknowledged in time
     └── DropRefusedError     drop() without the queue's name as confirmation (also a ValueError)

Arguments that are wrong in themselves (a weight that is not a positive integer, a Celery option
the decorator does not take) raise the built-in ValueError or TypeError before Redis is touched.
Redis being unreachable surfaces as redis-py's own ConnectionError.
"""

from __future__ import annotations

from redis.exceptions import ResponseError

from app.vtrr.layout import DUPLICATE, FULL, OVERLIMIT


class VTRRError(Exception):
    """Base of the fair queue's own errors."""


class DuplicateTaskError(VTRRError, ValueError):
    """A task id is already queued or in flight; nothing of the batch was written."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task id {task_id!r} is already queued or in flight")
        self.task_id = task_id


class QueueFullError(VTRRError):
    """The batch would take its partition past the most items it may have queued; nothing of
    it was written."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the partition may have at most {limit} items queued")
        self.limit = limit


class OverLimitError(VTRRError):
    """An item of the batch weighs more than its partition's limit on the weight its items in
    flight may hold: it could never start beside another. Nothing of the batch was written."""

    def __init__(self, limit: float) -> None:
        super().__init__(f"an item weighs more than the {limit:g} its partition may hold")
        self.limit = limit


class NotReplicatedError(VTRRError):
    """The call was made on the primary, but fewer replicas than asked for acknowledged it in
    time (Redis WAIT): a failover now could lose it. Its effect may stand: retry idempotently."""

    def __init__(self, acked: int, wanted: int) -> None:
        super().__init__(f"{acked} of {wanted} replicas acknowledged the write in time")
        self.acked, self.wanted = acked, wanted


class DropRefusedError(VTRRError, ValueError):
    """drop() was called without the queue's name as confirmation."""


def from_reply(exc: ResponseError) -> Exception:
    """The exception that a Lua error reply stands for (the reply itself when it is not ours)."""
    code, _, detail = str(exc).partition(" ")
    if code == DUPLICATE:
        return DuplicateTaskError(detail)
    if code == FULL:
        return QueueFullError(int(detail))
    if code == OVERLIMIT:
        return OverLimitError(float(detail))
    return exc
