"""`uv run scripts/bench.py`: overhead and capacity benchmarks (scripts/benchkit/overhead/)."""

import sys

from scripts.benchkit.overhead.cli import main

if __name__ == "__main__":
    sys.exit(main())
