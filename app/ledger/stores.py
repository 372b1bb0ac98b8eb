"""What a process opens of the SQL side: the database, migrated, and its account store, seeded
from USERS_FILE while it holds no account (a fresh store starts from the file; after that the
store is the truth and the file is not read again)."""

from __future__ import annotations

from dataclasses import dataclass

from app.auth import Accounts
from app.ledger.accounts import AccountStore
from app.ledger.database import Database
from app.settings import Settings


@dataclass(frozen=True)
class Ledger:
    """The database of one process and the accounts in it."""

    db: Database
    accounts: AccountStore

    def close(self) -> None:
        """Release the database's connections."""
        self.db.close()


def open_ledger(settings: Settings) -> Ledger:
    """Migrate and open DATABASE_URL's database; seed its accounts from USERS_FILE if it has
    none (a ValueError, as from Accounts.load, when that file is needed and malformed)."""
    db = Database.open(settings.database)
    store = AccountStore(db)
    if store.empty():
        store.seed(Accounts.load(settings.users_file).all())
    return Ledger(db, store)
