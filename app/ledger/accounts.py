"""Accounts, their API keys and the audit log, in the SQL database. Every change names who made
it and is written to the audit log in the same transaction. A key is made here, shown once to
whoever asked for it, and kept only as its SHA-256 digest; a revoked key stays, marked."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.account import TERMS, Terms, columns_of
from app.auth import Account, Accounts, digest, stored_digest
from app.ledger.database import Database
from app.ledger.schema import AccountRow, AuditRow, KeyRow

#: What an account's update may change: its terms (the id may not: bills and jobs name it).
EDITABLE = frozenset(TERMS)
#: What a new account's columns are unless told: its terms' defaults, but for null ones.
DEFAULTS = columns_of({name: f.default for name, f in Terms.model_fields.items()
                       if f.default is not None})  # fmt: skip
#: New keys: a recognisable prefix, then 256 random bits.
KEY_PREFIX = "fg_"


class AccountError(ValueError):
    """A change that cannot be made: an unknown or existing account, an unknown key."""


@dataclass(frozen=True)
class IssuedKey:
    """A key just made: its text, shown once, and what is kept of it."""

    key: str
    digest: str
    user_id: str
    label: str


def _audit(session: Session, actor: str, action: str, target: str, detail: dict[str, Any]) -> None:
    session.add(AuditRow(at=time.time(), actor=actor, action=action, target=target,
                         detail=json.dumps(detail, sort_keys=True)))  # fmt: skip


class AccountStore:
    """Accounts, keys and the audit log of one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def seed(self, accounts: Iterable[Account], actor: str = "seed") -> int:
        """Write these accounts and their keys (plain or `sha256:` digests) into an empty store;
        how many were written (0 when the store has accounts already, or another process
        seeded it meanwhile: then its primary keys collide and this transaction is undone)."""
        try:
            return self._seed(accounts, actor)
        except IntegrityError:
            return 0

    def empty(self) -> bool:
        """Whether the store holds no account at all."""
        with self.db.sessions() as session:
            return not session.scalar(select(func.count()).select_from(AccountRow))

    def _seed(self, accounts: Iterable[Account], actor: str) -> int:
        # Three plain INSERTs of many rows, not the ORM's unit of work object by object: every
        # fresh database does this (each API app a test opens too).
        now = time.time()
        rows, keys, audit = [], [], []
        for account in accounts:
            fields = columns_of(account.model_dump(include=set(EDITABLE)))
            rows.append(
                {"user_id": account.user_id, "created_at": now, "disabled": False, **fields}
            )
            keys += [
                {"digest": stored_digest(key), "user_id": account.user_id, "label": "seeded",
                 "created_at": now}
                for key in account.api_keys
            ]  # fmt: skip
            detail = json.dumps(fields, sort_keys=True)
            audit.append({"at": now, "actor": actor, "action": "account.create",
                          "target": account.user_id, "detail": detail})  # fmt: skip
        with self.db.sessions.begin() as session:
            if session.scalar(select(func.count()).select_from(AccountRow)):
                return 0
            for table, values in ((AccountRow, rows), (KeyRow, keys), (AuditRow, audit)):
                if values:
                    session.execute(insert(table), values)
            return len(rows)

    def create(self, actor: str, user_id: str, **fields: Any) -> AccountRow:
        """A new account (fields from EDITABLE; money in units of money, kept in micro-units,
        as the audit log names it)."""
        unknown = set(fields) - EDITABLE
        if unknown:
            raise AccountError(f"unknown account fields {sorted(unknown)}")
        with self.db.sessions.begin() as session:
            if session.get(AccountRow, user_id) is not None:
                raise AccountError(f"account {user_id} exists already")
            values = {**DEFAULTS, **columns_of(fields)}
            row = AccountRow(user_id=user_id, disabled=False, created_at=time.time(), **values)
            session.add(row)
            _audit(session, actor, "account.create", user_id, values)
            return row

    def update(self, actor: str, user_id: str, **changes: Any) -> AccountRow:
        """Change an account's fields (from EDITABLE, or `disabled`); the audit log keeps what
        each was before."""
        unknown = set(changes) - EDITABLE - {"disabled"}
        if unknown:
            raise AccountError(f"unknown account fields {sorted(unknown)}")
        changes = columns_of(changes)
        with self.db.sessions.begin() as session:
            row = self._row(session, user_id)
            before = {name: getattr(row, name) for name in changes}
            for name, value in changes.items():
                setattr(row, name, value)
            action = "account.disable" if changes == {"disabled": True} else "account.update"
            _audit(session, actor, action, user_id, {"before": before, "after": changes})
            return row

    def get(self, user_id: str) -> AccountRow | None:
        """One account, or None."""
        with self.db.sessions() as session:
            return session.get(AccountRow, user_id)

    def all(self) -> list[AccountRow]:
        """Every account, by id."""
        with self.db.sessions() as session:
            return list(session.scalars(select(AccountRow).order_by(AccountRow.user_id)))

    def issue_key(self, actor: str, user_id: str, label: str = "") -> IssuedKey:
        """Make a key for the account: its text is in the answer and nowhere else."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        hexdigest = digest(key)
        with self.db.sessions.begin() as session:
            self._row(session, user_id)
            session.add(KeyRow(digest=hexdigest, user_id=user_id, label=label,
                               created_at=time.time()))  # fmt: skip
            _audit(session, actor, "key.issue", user_id, {"key": hexdigest[:12], "label": label})
        return IssuedKey(key, hexdigest, user_id, label)

    def revoke_key(self, actor: str, prefix: str) -> KeyRow:
        """Revoke the one live key whose digest starts with prefix (at least 8 hex digits)."""
        if len(prefix) < 8:
            raise AccountError("name a key by at least 8 digits of its digest")
        with self.db.sessions.begin() as session:
            found = list(
                session.scalars(select(KeyRow).where(KeyRow.digest.startswith(prefix.lower())))
            )
            if len(found) != 1:
                raise AccountError(f"{len(found)} keys match {prefix!r}")
            row = found[0]
            if row.revoked_at is None:
                row.revoked_at = time.time()
                _audit(session, actor, "key.revoke", row.user_id, {"key": row.digest[:12]})
            return row

    def keys(self, user_id: str) -> list[KeyRow]:
        """An account's keys, revoked ones too, oldest first."""
        with self.db.sessions() as session:
            query = select(KeyRow).where(KeyRow.user_id == user_id).order_by(KeyRow.created_at)
            return list(session.scalars(query))

    def live_key_counts(self) -> dict[str, int]:
        """Each account's keys that are not revoked (accounts with none are left out)."""
        with self.db.sessions() as session:
            query = (
                select(KeyRow.user_id, func.count())
                .where(KeyRow.revoked_at.is_(None))
                .group_by(KeyRow.user_id)
            )
            return {user_id: int(n) for user_id, n in session.execute(query)}

    def audit(self, limit: int = 100, before: int | None = None) -> list[AuditRow]:
        """The newest changes, at most limit, older than the entry `before` when given."""
        with self.db.sessions() as session:
            query = select(AuditRow)
            if before is not None:
                query = query.where(AuditRow.id < before)
            return list(session.scalars(query.order_by(AuditRow.id.desc()).limit(limit)))

    def snapshot(self) -> Accounts:
        """The accounts as the API authenticates them: enabled accounts, their live keys."""
        with self.db.sessions() as session:
            rows = list(session.scalars(select(AccountRow).where(AccountRow.disabled.is_(False))))
            live = session.scalars(select(KeyRow).where(KeyRow.revoked_at.is_(None)))
            keys: dict[str, list[str]] = {}
            for key in live:
                keys.setdefault(key.user_id, []).append(f"sha256:{key.digest}")
        return Accounts([_account(row, keys.get(row.user_id, [])) for row in rows])

    @staticmethod
    def _row(session: Session, user_id: str) -> AccountRow:
        row = session.get(AccountRow, user_id)
        if row is None:
            raise AccountError(f"no account {user_id}")
        return row


def _account(row: AccountRow, keys: list[str]) -> Account:
    """An account row as app.auth knows accounts."""
    return Account(user_id=row.user_id, api_keys=tuple(keys), **row.terms().model_dump())
