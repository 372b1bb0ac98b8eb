"""Writes that must reach replicas before they count (Redis WAIT): the shape of the ask, the
default wait, and the loop that repeats a short-counted call. A call made on the primary is
acknowledged by WAIT on its own connection once that many replicas have every write of that
connection; replication being asynchronous, a failover may otherwise lose what the primary
acknowledged."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from app.vtrr.errors import NotReplicatedError

#: (replicas, milliseconds): a write is acknowledged once that many replicas have it, waiting
#: at most that long (Redis WAIT).
Replicas = tuple[int, int]
#: How long one WAIT waits for its replicas (milliseconds).
REPLICA_WAIT_MS = 1000
#: How long a short-counted write is repeated before NotReplicatedError (seconds).
REPLICA_PATIENCE_S = 30.0


def until_replicated(call: Callable[[], tuple[Any, int]], wanted: int, patience_s: float) -> Any:
    """Make a call whose write is followed by WAIT (it returns its reply and the replicas that
    acknowledged it) until `wanted` replicas have it, repeating it while fewer do for at most
    patience_s; returns the first call's reply, or raises NotReplicatedError. The call must be
    safe to repeat and write something each time (so that its WAIT covers the first call's
    write: Redis counts, per connection, the replicas that have its latest write)."""
    deadline = time.monotonic() + patience_s
    first: tuple[Any, int] | None = None
    while True:
        made = call()
        first = first or made
        if made[1] >= wanted:
            return first[0]
        if time.monotonic() >= deadline:
            raise NotReplicatedError(made[1], wanted)
