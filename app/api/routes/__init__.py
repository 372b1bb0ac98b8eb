"""One router per resource: jobs (submit, status, stream, cancel), tasks (the caller's jobs),
accounts (the caller's own, and the admins' accounts, keys and audit log), bills, health,
metrics, admin, dashboard."""
