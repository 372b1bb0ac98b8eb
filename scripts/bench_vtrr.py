"""`uv run scripts/bench_vtrr.py`: the fair queue against a Redis list
(scripts/benchkit/queue_cost/)."""

import sys

from scripts.benchkit.queue_cost.cli import main

if __name__ == "__main__":
    sys.exit(main())
