"""`uv run scripts/soak.py`: workers killed at random under load (scripts/benchkit/soak/)."""

import sys

from scripts.benchkit.soak.cli import main

if __name__ == "__main__":
    sys.exit(main())
