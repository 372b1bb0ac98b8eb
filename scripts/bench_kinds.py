"""`uv run scripts/bench_kinds.py`: what consumers of kinds (a mixed fleet's classes of card)
cost a dequeue+ack, beside the library without kinds and the floor
(scripts/benchkit/kinds_cost.py)."""

import sys

from scripts.benchkit.kinds_cost import main

if __name__ == "__main__":
    sys.exit(main())
