"""Accounts and API keys: which account a key belongs to. An account itself, and what it may
do, is app/account.py's Account (named here as well, for its many readers).

The accounts file lists each account's keys either plain (for the demo) or as `sha256:<hex>`.
Keys are looked up by their SHA-256 digest, so a request's key is never compared byte by byte
with a stored one, and never logged. Fairness, ownership and billing belong to the account.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.account import Account as Account  # named here as well: its readers import it so


class FileAccount(Account):
    """An account of the accounts file, which must list a key: a file's account without one
    could never be used."""

    api_keys: tuple[str, ...] = Field(min_length=1)


class AccountsFile(BaseModel):
    """The shape of the accounts file."""

    model_config = ConfigDict(extra="forbid")

    accounts: list[FileAccount]


def digest(key: str) -> str:
    """The SHA-256 hex digest of an API key, as stored in the accounts file."""
    return hashlib.sha256(key.encode()).hexdigest()


def stored_digest(key: str) -> str:
    """The digest of a key as an accounts file lists it: `sha256:<hex>`, or the plain key."""
    if key.startswith("sha256:"):
        return key.removeprefix("sha256:").lower()
    return digest(key)


class AccountBook(Protocol):
    """What the service asks of its accounts: Accounts (a fixed set), or the live accounts of
    the account store (app.ledger.live)."""

    def authenticate(self, key: str | None) -> Account | None: ...
    def get(self, user_id: str) -> Account | None: ...
    def share(self, user_id: str) -> float: ...
    def all(self) -> list[Account]: ...


class Accounts:
    """All accounts, indexed by the digests of their keys."""

    def __init__(self, accounts: Sequence[Account]) -> None:
        self._by_id = {a.user_id: a for a in accounts}
        if len(self._by_id) != len(accounts):
            raise ValueError("two accounts share a user_id")
        self._by_digest: dict[str, Account] = {}
        for account in accounts:
            for key in account.api_keys:
                if self._by_digest.setdefault(stored_digest(key), account) is not account:
                    raise ValueError(f"an API key of {account.user_id} belongs to another account")

    @classmethod
    def load(cls, path: Path) -> Accounts:
        """Read and check the accounts file; a clear ValueError when it is malformed."""
        try:
            return cls(AccountsFile.model_validate(json.loads(path.read_text())).accounts)
        except (OSError, json.JSONDecodeError, ValidationError) as exc:
            raise ValueError(f"cannot load accounts from {path}: {exc}") from exc

    def authenticate(self, key: str | None) -> Account | None:
        """The account that owns this key, or None; the same work whatever the key.

        The lookup is by digest: how long it takes can only tell an attacker about the digest
        of what they sent, which they know already, never about a stored key.
        """
        return self._by_digest.get(digest(key or ""))

    def owner(self, key_digest: str) -> Account | None:
        """The account that owns the key with this SHA-256 hex digest, or None."""
        return self._by_digest.get(key_digest)

    def get(self, user_id: str) -> Account | None:
        """The account with this id, or None."""
        return self._by_id.get(user_id)

    def share(self, user_id: str) -> float:
        """An account's fair-share weight (1 for an unknown id)."""
        account = self._by_id.get(user_id)
        return account.share if account else 1.0

    def all(self) -> list[Account]:
        """Every account."""
        return list(self._by_id.values())
