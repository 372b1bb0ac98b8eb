"""One router per resource: jobs (submit, status, stream, cancel), tasks (the caller's account
and jobs), bills, health, metrics, admin, dashboard."""
