"""Fairness scenarios: fairgpu against a FIFO baseline (`scripts/load.py --scenario NAME`).

Modules: `scenarios` (who submits what), `systems` (fairgpu over HTTP, plain Celery FIFO),
`fifo_app` (the FIFO workers' Celery app), `runner` (drives a scenario), `metrics` (pure
functions of the jobs' timestamps), `analysis` (numbers and targets), `report` (tables,
JSON, plots), `cli` (the command line); `reshare`, `memory` and `preemption` are the scenarios
that run on stacks of their own. docs/fairness.md has the definitions and results.
"""
