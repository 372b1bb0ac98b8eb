"""Alembic's environment: the database named in the configuration, the tables of schema.py.

Every process migrates at start, and a fresh stack starts several at once: on PostgreSQL they
take turns under an advisory lock; on a SQLite file, under a lock beside it (database.py
_migrating: its DDL is not transactional)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, text

from app.ledger.schema import Base

#: The advisory lock that fairgpu's migrations hold on PostgreSQL (any fixed number).
MIGRATION_LOCK = 0x6661697267707501

config = context.config
url = config.get_main_option("sqlalchemy.url")
assert url is not None, "alembic_config() names the database"
sqlite = url.startswith("sqlite")
engine = create_engine(url, connect_args={"timeout": 30} if sqlite else {})
with engine.connect() as connection:
    if not sqlite:
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
        connection.commit()
    # SQLite changes tables by copying them (render_as_batch); PostgreSQL alters them in place.
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=sqlite)
    with context.begin_transaction():
        context.run_migrations()
    if not sqlite:
        connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
        connection.commit()
engine.dispose()
