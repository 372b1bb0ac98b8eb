"""Accounts and keys in the SQL store: seeded once from the accounts file, changed by admins,
every change in the audit log, a key shown once and kept as its digest, a revoked key and a
disabled account refused by the snapshot the API authenticates with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from app.auth import Account, Accounts, digest
from app.ledger.accounts import AccountError, AccountStore
from app.ledger.database import Database
from app.ledger.schema import KeyRow

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "users.json"
DEMO = "11111111-1111-1111-1111-111111111111"


def test_the_accounts_file_seeds_an_empty_store_once(db: Database) -> None:
    store = AccountStore(db)
    from_file = Accounts.load(FIXTURES)
    assert store.seed(from_file.all()) == len(from_file.all())
    assert store.seed(from_file.all()) == 0  # not again
    snapshot = store.snapshot()
    seeded, listed = snapshot.authenticate("default_api_key"), from_file.get(DEMO)
    assert seeded is not None and listed is not None
    assert (seeded.user_id, seeded.share, seeded.admin) == (DEMO, listed.share, listed.admin)
    with db.sessions() as session:
        stored = set(session.scalars(select(KeyRow.digest)))
    assert digest("default_api_key") in stored
    assert "default_api_key" not in json.dumps(sorted(stored))  # digests only


def test_a_new_key_is_shown_once_and_works_until_revoked(db: Database) -> None:
    store = AccountStore(db)
    store.create("admin-1", "team-a", description="Team A", share=2.0)
    issued = store.issue_key("admin-1", "team-a", label="laptop")
    assert issued.key.startswith("fg_") and issued.digest == digest(issued.key)
    account = store.snapshot().authenticate(issued.key)
    assert account is not None and (account.user_id, account.share) == ("team-a", 2.0)
    assert [k.digest for k in store.keys("team-a")] == [issued.digest]
    store.revoke_key("admin-1", issued.digest[:10])
    assert store.snapshot().authenticate(issued.key) is None
    assert store.keys("team-a")[0].revoked_at is not None


def test_a_disabled_account_authenticates_no_more(db: Database) -> None:
    store = AccountStore(db)
    store.create("admin-1", "team-b")
    key = store.issue_key("admin-1", "team-b").key
    store.update("admin-1", "team-b", disabled=True)
    assert store.snapshot().authenticate(key) is None
    assert store.get("team-b") is not None  # kept: its bills still name it


def test_every_change_is_audited_with_who_and_what_was_before(db: Database) -> None:
    store = AccountStore(db)
    store.create("admin-1", "team-c", share=1.0)
    store.update("admin-2", "team-c", share=3.0, budget_gpu_seconds=3600.0)
    issued = store.issue_key("admin-1", "team-c")
    store.revoke_key("admin-2", issued.digest[:8])
    entries = store.audit()
    assert [(e.actor, e.action, e.target) for e in entries] == [
        ("admin-2", "key.revoke", "team-c"),
        ("admin-1", "key.issue", "team-c"),
        ("admin-2", "account.update", "team-c"),
        ("admin-1", "account.create", "team-c"),
    ]
    change = json.loads(entries[2].detail)
    assert change["before"] == {"share": 1.0, "budget_gpu_seconds": None}
    assert change["after"] == {"share": 3.0, "budget_gpu_seconds": 3600.0}
    assert issued.key not in "".join(e.detail for e in entries)  # never the key itself
    assert [e.id for e in store.audit(limit=2, before=entries[1].id)] == [
        entries[2].id,
        entries[3].id,
    ]


def test_bad_changes_are_refused_and_change_nothing(db: Database) -> None:
    store = AccountStore(db)
    store.create("admin-1", "team-d")
    with pytest.raises(AccountError, match="exists"):
        store.create("admin-1", "team-d")
    with pytest.raises(AccountError, match="unknown account fields"):
        store.update("admin-1", "team-d", created_at=0.0)
    with pytest.raises(AccountError, match="no account"):
        store.issue_key("admin-1", "nobody")
    with pytest.raises(AccountError, match="at least 8"):
        store.revoke_key("admin-1", "abc")
    assert len(store.audit()) == 1


def test_live_keys_are_counted_per_account(db: Database) -> None:
    store = AccountStore(db)
    store.create("admin", "a")
    store.create("admin", "b")
    first = store.issue_key("admin", "a")
    store.issue_key("admin", "a")
    store.revoke_key("admin", first.digest[:12])
    assert store.live_key_counts() == {"a": 1}
    assert store.empty() is False


def test_an_accounts_limits_are_seeded_changed_cleared_and_audited(db: Database) -> None:
    store = AccountStore(db)
    lab = Account(user_id="lab", api_keys=("lab_key",), max_running=2, max_held_gpu_seconds=600)
    assert store.seed([lab]) == 1
    seeded = store.snapshot().authenticate("lab_key")
    assert seeded is not None
    assert (seeded.max_running, seeded.max_held_gpu_seconds) == (2, 600.0)
    created = json.loads(store.audit()[0].detail)
    assert (created["max_running"], created["max_held_gpu_seconds"]) == (2, 600.0)

    store.update("admin-1", "lab", max_running=None, max_held_gpu_seconds=60.5)
    changed = store.snapshot().get("lab")
    assert changed is not None
    assert (changed.max_running, changed.max_held_gpu_seconds) == (None, 60.5)
    entry = store.audit()[0]
    assert (entry.actor, entry.action) == ("admin-1", "account.update")
    detail = json.loads(entry.detail)
    assert detail["before"] == {"max_running": 2, "max_held_gpu_seconds": 600.0}
    assert detail["after"] == {"max_running": None, "max_held_gpu_seconds": 60.5}

    store.create("admin-1", "team-e", max_running=3)
    opened = store.get("team-e")
    assert opened is not None and (opened.max_running, opened.max_held_gpu_seconds) == (3, None)
