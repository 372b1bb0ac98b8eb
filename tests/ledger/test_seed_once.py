"""The accounts file applies once, when it seeds a fresh store: a process that opens the ledger
later (a restart) reads the store, never the file again, whatever field the file changed
(docs/ledger.md, docs/operations.md "Seeding")."""

from __future__ import annotations

import json
from pathlib import Path

from app.ledger.stores import open_ledger
from app.settings import Settings


def write_accounts(path: Path, accounts: list[dict[str, object]]) -> None:
    path.write_text(json.dumps({"accounts": accounts}))


def test_a_later_change_of_the_accounts_file_does_nothing_even_after_a_restart(
    tmp_path: Path,
) -> None:
    users = tmp_path / "users.json"
    team = {"user_id": "team-a", "api_keys": ["key-a"], "share": 1, "max_running": 2}
    write_accounts(users, [team])
    settings = Settings(users_file=users, database_url=f"sqlite:///{tmp_path / 'ledger.db'}")
    open_ledger(settings).close()  # the first start seeds the store

    changed = {**team, "share": 3, "max_running": 5}
    write_accounts(users, [changed, {"user_id": "team-b", "api_keys": ["key-b"]}])
    restarted = open_ledger(settings)
    try:
        snapshot = restarted.accounts.snapshot()
        account = snapshot.get("team-a")
        assert account is not None
        assert (account.share, account.max_running) == (1, 2)
        assert snapshot.get("team-b") is None
        assert snapshot.authenticate("key-b") is None
    finally:
        restarted.close()
