"""The benchmarks' code; the files in scripts/ are only the commands that run it.

    stats.py       percentile (the one definition of p50/p99), median, ratio, ABBA rounds
    report.py      a report's tables, verdicts and JSON (rich)
    host.py        the machine: ROOT, progress lines, CPU and memory of processes
    children.py    processes a benchmark starts: app.dev.processes, Redis, Celery workers
    polling.py     the asyncio twin of app.dev.processes.wait_until
    load/          scripts/load.py: the load test of a running stack
    fairness/      scripts/load.py --scenario: fairgpu against a FIFO baseline
    overhead/      scripts/bench.py: overhead and capacity, each against its baseline
    queue_cost/    scripts/bench_vtrr.py: the fair queue against a Redis list
    soak/          scripts/soak.py: workers killed at random under load
    gpu_check.py   scripts/gpu_check.py: what only a GPU machine can check (gpu_jobs.py: its job
                   types; gpu_report.py: its table for docs/benchmarks.md)
    instructions.py  scripts/count_instructions.py: redis-server instructions per operation

Dependencies point one way: the commands import this package, never the reverse; the
subpackages import the shared modules above, and none imports another subpackage except
overhead/scaling.py, which reuses queue_cost's measurement, and load/cli.py, which hands
--scenario to fairness/.
"""
