"""`uv run scripts/count_instructions.py`: redis-server instructions per fair-queue operation,
under callgrind (scripts/benchkit/instructions.py)."""

import sys

from scripts.benchkit.instructions import main

if __name__ == "__main__":
    sys.exit(main())
