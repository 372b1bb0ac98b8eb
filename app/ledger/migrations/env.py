"""Alembic's environment: the database named in the configuration, the tables of schema.py."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from app.ledger.schema import Base

config = context.config
url = config.get_main_option("sqlalchemy.url")
assert url is not None, "alembic_config() names the database"
engine = create_engine(url)
with engine.connect() as connection:
    # SQLite changes tables by copying them (render_as_batch); PostgreSQL alters them in place.
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
