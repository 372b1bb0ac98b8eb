"""Overhead and capacity benchmarks of fairgpu, each run side by side with its baseline.

    uv run scripts/bench.py                       # every benchmark, full size
    uv run scripts/bench.py --only gap --quick    # one benchmark on a tiny input
    uv run scripts/bench.py --json                # the results as JSON on stdout

Benchmarks (see docs/benchmarks.md for what each measures and against what):

- throughput: no-op jobs through the fair queue (VTRRQueue) against plain Celery tasks;
- gap: a busy worker's end-to-next-start gap, and an idle worker's submit-to-start latency;
- enqueue: POST /enqueue-task, 16 concurrent clients, one API process;
- sse: open event streams held by one API process, memory and delivery latency;
- scaling: Redis cost per job from 1e3 to 1e6 queued jobs and from 1 to 1e5 accounts.

Every benchmark starts what it needs (an embedded redis-server, workers, an API process) and
stops it; the machine's own Redis is never used.
"""
