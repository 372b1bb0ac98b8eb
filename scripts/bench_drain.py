"""`uv run scripts/bench_drain.py`: a drain's step, one call against two
(scripts/benchkit/drain_step.py)."""

import sys

from scripts.benchkit.drain_step import main

if __name__ == "__main__":
    sys.exit(main())
