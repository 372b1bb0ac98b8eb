"""app/errors.py: which Redis failures are worth a retry, and the store's Lua error replies."""

from __future__ import annotations

import pytest
from redis.exceptions import (
    BusyLoadingError,
    ConnectionError,
    MasterDownError,
    ReadOnlyError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from app.errors import (
    TRANSIENT_REPLIES,
    IdempotencyMismatchError,
    from_reply,
    transient,
)


@pytest.mark.parametrize("code", sorted(TRANSIENT_REPLIES))
def test_each_transient_reply_is_transient(code: str) -> None:
    assert transient(ResponseError(f"{code} the server says wait"))


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionError("refused"),
        TimeoutError("slow"),
        BusyLoadingError("loading"),
        ReadOnlyError("You can't write against a read only replica."),
        MasterDownError("link down"),
        TryAgainError("multi-key"),
        OSError("unreachable"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_redis_py_classes_of_transient_failures_are_transient(exc: Exception) -> None:
    assert transient(exc)


@pytest.mark.parametrize(
    "text",
    [
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "ERR user_script:12: attempt to compare nil with number",
        "NOSCRIPT No matching script",
        "DUPLICATE abc",
    ],
)
def test_other_replies_are_not_transient(text: str) -> None:
    assert not transient(ResponseError(text))


def test_the_store_scripts_replies_become_our_errors() -> None:
    mismatch = from_reply(ResponseError("IDEMPOTENCY_MISMATCH job-2"))
    assert isinstance(mismatch, IdempotencyMismatchError) and mismatch.job_id == "job-2"
    other = ResponseError("WRONGTYPE nope")
    assert from_reply(other) is other
