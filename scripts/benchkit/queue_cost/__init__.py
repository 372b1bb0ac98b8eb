"""The fair queue against a plain Redis list (`scripts/bench_vtrr.py`, and the scaling
benchmark of `scripts/bench.py`): `measure` (the points and their chunks), `report` (the
Markdown table and the targets), `cli`."""
