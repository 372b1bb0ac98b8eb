"""`uv run scripts/bench_dequeue_floor.py`: the library's dequeue+ack against the least a leased
dequeue+ack can cost (scripts/benchkit/dequeue_floor.py)."""

import sys

from scripts.benchkit.dequeue_floor import main

if __name__ == "__main__":
    sys.exit(main())
