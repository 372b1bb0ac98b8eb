"""The load test of a running stack (`scripts/load.py`): `jobs` (the plan and what became of
each job), `client` (submitting and waiting over HTTP), `tables` (the report), `cli`."""
