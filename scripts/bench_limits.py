"""`uv run scripts/bench_limits.py`: what per-partition limits cost a dequeue+ack
(scripts/benchkit/limits_cost.py)."""

import sys

from scripts.benchkit.limits_cost import main

if __name__ == "__main__":
    sys.exit(main())
