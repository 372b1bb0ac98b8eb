"""`uv run scripts/load.py`: the load test of a running stack, or with --scenario the
fairness scenarios (scripts/benchkit/load/, scripts/benchkit/fairness/)."""

import sys

from scripts.benchkit.load.cli import main

if __name__ == "__main__":
    sys.exit(main())
