"""The SQL side of fairgpu: the billing ledger (every bill, once, kept past the job records'
TTL), and the accounts, their keys and the audit log of their changes. SQLite embedded, for
`fairgpu dev` and the tests; PostgreSQL in Compose and production. SQLAlchemy 2 for the
queries, Alembic for the schema's migrations (migrations/)."""
