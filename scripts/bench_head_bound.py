"""`uv run scripts/bench_head_bound.py`: what the bound on request heads costs a request
(scripts/benchkit/head_bound.py)."""

import sys

from scripts.benchkit.head_bound import main

if __name__ == "__main__":
    sys.exit(main())
