"""The soak (`scripts/soak.py`): `chaos` (kills and restarts workers), `checks` (what must hold
at the end, and the figures), `cli` (the stack, the load and the command line)."""
